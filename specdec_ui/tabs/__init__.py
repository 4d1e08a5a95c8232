"""The page's tabs, one module each, in the order of the lesson (``specdec_ui.page.TABS``): ``rule``, ``step``,
``run``, ``compare``. Each holds its tab's components, view records, handlers and layout, and builds the tab
with ``build(page, tab_id)``; what two tabs share lives beside this package, never in a tab's module, and no
tab imports another."""
