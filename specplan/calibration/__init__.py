"""Measuring a device: the ``specplan calibrate`` benchmark, its fit, and the NGram host-cost timing.

torch is used only inside ``stack``, ``timing``, ``runner`` and ``attention``, imported when a
calibration or a validation runs; ``fit`` and ``draft_bench`` need numpy/scipy alone. Entry point:
``specplan.calibration.runner.run_calibration``. The fidelity replay of ``specplan validate`` builds on
``stack``, ``attention`` and ``timing`` (``specplan.validation.replay``). ``step_fit`` calibrates the
same profile form from an engine's own steps (``calibrate --from-logs engine_steps.csv``) in the terms
``step_forms`` keeps by cross-validation, and
``step_errors`` says where a profile's step-time error sits (shared with ``validate --engine vllm``).
"""
