"""glibc's allocator: set for loading (large temporaries given back at once) while a pair loads, and for
decoding (a round's temporaries reused from the heap) once it has loaded (specdec.weights.loading)."""
import ctypes
import platform

import pytest

from specdec.weights import loading


def _glibc() -> bool:
    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallopt") and platform.libc_ver()[0] == "glibc"
    except OSError:
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt is not here")
def test_glibc_accepts_both_settings():
    """mallopt returns 0 for a setting it refuses (older glibc: an mmap threshold above 32 MiB on 64-bit)."""
    try:
        assert loading._keep_freed_memory()
        assert loading._return_freed_memory()
    finally:
        loading._keep_freed_memory()


def test_a_pair_loads_under_the_loading_settings_and_decodes_under_the_decoding_ones(monkeypatch, tmp_path):
    from helpers import tiny_gguf
    state, seen = [], []
    monkeypatch.setattr(loading, "_mallopt", lambda settings: state.append(settings) or True)
    real_load_model = loading.load_model
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: seen.append(state[-1]) or real_load_model(*a, **k))
    tiny_gguf.install(monkeypatch, tmp_path, tiny_gguf.build(tmp_path / "gguf"))
    pair = loading.load_pair(tiny_gguf.NAME, None, "cpu", "float32")
    try:
        assert seen == [loading.LOADING_MALLOC] and state == [loading.LOADING_MALLOC, loading.DECODING_MALLOC]
        assert loading.load_pair(tiny_gguf.NAME, None, "cpu", "float32") is pair  # the memo: decoding again
        assert state[-1] == loading.DECODING_MALLOC and len(seen) == 1
    finally:
        loading.unload(pair)
