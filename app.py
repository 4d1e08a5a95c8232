"""The speculative decoding teaching app.

    python app.py [--host 127.0.0.1] [--port 7860] [--share] [--target ...] [--draft ...] [--device ...] [--precision ...]

The page is up at once; the models load in a background thread (once per process) while a progress
bar shows how far it got. The UI lives in the ``specdec_ui`` package; the algorithm is ``specdec``'s.
"""
from __future__ import annotations

import argparse

from specdec.decode.settings import add_model_arguments, models_from_args
from specdec_ui.state import Loader


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Speculative decoding teaching app")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true", help="also create a public gradio.live link")
    add_model_arguments(parser)
    args = parser.parse_args(argv)
    loader = Loader(models_from_args(args)).load_in_background()
    # the models load while gradio is imported and the page is built: seconds of a start on both cores
    from specdec_ui.page import build_demo, launch
    launch(build_demo(loader), args.host, args.port, args.share)


if __name__ == "__main__":
    main()
