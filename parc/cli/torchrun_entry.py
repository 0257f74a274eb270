"""Entry point for a torchrun launch compiled by parc: ``parc run`` on the plan the launch
script exports as ``PARC_PLAN`` (plan.json beside the script), one process per rank.

In a spec: ``target torchrun { entrypoint = "<path to this file>"  args = ["--steps", "10"] }``;
``python -c "import parc.cli.torchrun_entry as m; print(m.__file__)"`` prints the path.
"""
import os
import sys

if __name__ == "__main__":
    from parc.cli.main import main

    plan = os.environ.get("PARC_PLAN")
    if not plan:
        sys.stderr.write("parc: PARC_PLAN is not set; launch this through the script `parc compile` emits\n")
        sys.exit(2)
    sys.exit(main(["run", plan, *sys.argv[1:]]))
