"""What the app and the notebooks show, computed from traces: the words for a round (:mod:`.render`,
:mod:`.render_tree`), the round figure (:mod:`.figure`), token kinds (:mod:`.tokenkind`), the theory
of acceptance and cost (:mod:`.theory`), the rule's experiments (:mod:`.experiment`) and why two
outputs differ (:mod:`.exactness`). Builds on :mod:`specdec.decode`; nothing below imports it."""
