"""The fidelity harness behind ``specplan validate``: simulate a scenario, replay its iterations on a
device, and measure the simulator's error.

- ``scenarios``: the bundled scenarios (``low``, ``high``) and scenario files, bound to a profile;
- ``schedule``: the simulated iterations as replayable steps (rows, query lengths, contexts, drafting);
- ``compare``: predicted terms per iteration, errors, error bins, and request timelines re-timed with
  measured steps;
- ``report``: ``report.md``, ``iterations.csv``, ``predicted_vs_measured.png``, ``summary.json``;
- ``replay`` (torch): each step run for real on the calibration ``DecoderStack``, KV growing and
  rewinding per request, timed as calibration times a grid point; imported only when a validation runs;
- ``runner``: ``run_validation``, the whole command.

``validate --engine vllm`` instead runs the requests on a real vLLM: ``vllm_env`` (model folder,
CPU process environment), ``vllm_engine`` (the run and its per-step recorder), ``vllm_compare``
(engine steps against simulated iterations), ``vllm_report`` (outputs), ``vllm_check`` (the command).
"""
