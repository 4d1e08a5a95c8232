"""The model: Qwen2's forward written lean (:mod:`.qwen2`), its KV cache (:mod:`.kvcache`), the model
behind a cache as the drafters and the engine call it (:mod:`.lm`), the linear layers and our C++
kernels (:mod:`.kernels`, :mod:`.native`, ``csrc/``), the precision chosen per machine
(:mod:`.precision`, :mod:`.calibration`), devices and clocks (:mod:`.devices`), CUDA graphs
(:mod:`.graphs`), timing a forward and fitting t(L) (:mod:`.timing`). Imports nothing from the
other sub-packages."""
