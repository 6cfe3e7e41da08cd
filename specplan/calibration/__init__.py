"""Measuring a device: the ``specplan calibrate`` benchmark, its fit, and the NGram host-cost timing; and
the fidelity replay behind ``specplan validate``.

Only this package uses torch, and only inside ``stack``, ``timing``, ``runner`` and ``replay``, which are
imported when a calibration or a validation runs; ``fit`` and ``draft_bench`` need numpy/scipy alone.
Entry points: ``specplan.calibration.runner.run_calibration``; ``specplan.calibration.replay`` (used by
``specplan.validation.runner.run_validation``).
"""
