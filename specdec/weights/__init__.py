"""The weights: the embedded pair's catalogue (:mod:`.catalogue`, a leaf), reading its GGUF parts
(:mod:`.gguf`, :mod:`.dequant`), the packed format and the on-disk cache (:mod:`.packed`,
:mod:`.store`), loading a pair and checking it is one (:mod:`.loading`, :mod:`.pairing`). Builds on
:mod:`specdec.model`."""
