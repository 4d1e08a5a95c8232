"""Placeholder, replaced below."""


def default_shape(pair) -> tuple[int, int]:
    return 2, 16
