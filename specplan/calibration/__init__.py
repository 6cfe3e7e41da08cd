"""Measuring a device: the ``specplan calibrate`` benchmark, its fit, and the NGram host-cost timing.

Only this package uses torch, and only inside ``stack``, ``timing`` and ``runner``, which are imported
when a calibration runs; ``fit`` and ``draft_bench`` need numpy/scipy alone. Entry point:
``specplan.calibration.runner.run_calibration``.
"""
