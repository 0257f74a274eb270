"""``parc import``: the launch scripts people already run, read into a reviewed plan.

The files (a shell script or a text of command lines, a Slurm batch script, a Kubernetes,
LeaderWorkerSet, TrainJob or SkyPilot YAML file, a torchtitan TOML, a DeepSpeed JSON config and
hostfile) are read, never run (:mod:`parc.importer.sh_eval`); each engine launch among them is
read through its target's ``flags.toml``, the table ``parc compile`` writes from, so what compile
writes import reads back; the spec is written in ``parc fmt``'s layout, every value with the
line it came from, ``unknown(...)`` where the files do not give a value (P040), and every option
parc has no key for in the target's ``extra_args`` (reported).

A sibling of planner/ and lint/: it reads language/ (fmt), model/ (the targets' tables, the
presets), resolve/ (the presets' data) and targets/ (their data helpers), and nothing reads it but
the command line.
"""
