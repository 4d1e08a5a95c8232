"""The algorithm: what a drafter proposes (:mod:`.proposal`), the drafters (:mod:`.drafters`, the
token tree in :mod:`.tree` and its shape in :mod:`.tree_shape`), the acceptance rule
(:mod:`.rule`, pure torch), sampling (:mod:`.sampling`), the engine that runs rounds
(:mod:`.engine`), a round's record (:mod:`.record`) and a run's settings (:mod:`.settings`).
Builds on :mod:`specdec.model` and :mod:`specdec.weights`."""
