"""The optional llama.cpp peer row: the flag, the report from a saved run, and (where installed) the real decoder."""

import copy
import importlib.util
from pathlib import Path

import pytest
from report_helpers import cell_value, sections, tables

from bench.__main__ import parse_args
from bench.methods import METHODS, PEER_METHODS
from bench.report import PEER_HEADING, mismatch_warning, render_markdown
from bench.results import MethodRun, load
from bench.summary import summarize
from bench.targets import compute_targets

SHIPPED = Path(__file__).parent / "fixtures"  # a run from before peers existed, two questions of each workload
PEER = "llamacpp_greedy"
HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None


def test_peers_run_by_default_where_installed_and_on_request():
    assert PEER in PEER_METHODS and PEER not in METHODS
    assert (PEER in parse_args([]).methods) == HAS_LLAMA_CPP  # every report compares where llama.cpp is there
    assert PEER not in parse_args(["--no-peers"]).methods
    assert parse_args(["--peers"]).methods == [*METHODS, PEER]
    assert parse_args(["--peers", "--methods", "llma"]).methods == ["greedy", "llma", PEER]
    with pytest.raises(SystemExit):
        parse_args(["--methods", PEER])  # a peer is no method of its own: --peers adds it


def with_peer(results, tokens_per_s: float, differing: set[str]):
    """The saved run as if llama.cpp had decoded every question at `tokens_per_s`, differing from greedy on some."""
    results = copy.deepcopy(results)
    for q in results.questions:
        tokens = q.run("greedy").tokens
        seconds = tokens / tokens_per_s
        q.runs.append(MethodRun(PEER, seconds, seconds, tokens, tokens, 0, q.question not in differing))
    results.rows += [summarize(w, PEER, results.questions_of(w)) for w in results.workloads]
    results.settings.methods.append(PEER)
    results.machine.llama_cpp = "0.3.16"
    return results


@pytest.fixture(scope="module")
def shipped():
    """The saved run, its rows summarized again from the questions the fixture keeps."""
    results = load(SHIPPED / "results_before_grounding.json")
    methods = results.settings.methods
    results.rows = [summarize(w, m, results.questions_of(w)) for w in results.workloads for m in methods]
    return results


def test_a_run_without_peers_says_nothing_of_them(shipped):
    report = render_markdown(shipped, [])
    assert shipped.peer_methods() == []
    assert PEER_HEADING not in sections(report) and "llama" not in report.lower()


def test_the_peer_table_sets_llama_cpp_beside_greedy_and_hf_greedy_on_the_same_questions(shipped):
    differing = {shipped.questions_of("novel")[0].question}
    results = with_peer(shipped, 60.0, differing)
    body = sections(render_markdown(results, []))[PEER_HEADING]
    assert "make bench BENCH_PEERS=1" in body and "0.3.16" in body
    (table,) = tables(body)
    header, rows = table[0], {row[0]: dict(zip(table[0], row, strict=True)) for row in table[1:]}
    assert header[:3] == ["workload", "questions", "llama.cpp tokens/s"]
    assert list(rows) == [*results.workloads, "all"]
    for workload in results.workloads:
        row, greedy, hf = rows[workload], results.row(workload, "greedy"), results.row(workload, "hf_greedy")
        assert int(row["questions"]) == greedy.questions
        assert cell_value(row["llama.cpp tokens/s"]) == pytest.approx(60.0, abs=0.05)
        assert cell_value(row["greedy tokens/s (this engine)"]) == pytest.approx(greedy.tokens_per_s, abs=0.05)
        assert cell_value(row["hf_greedy tokens/s"]) == pytest.approx(hf.tokens_per_s, abs=0.05)
    novel = len(results.questions_of("novel"))
    assert cell_value(rows["novel"]["same reply as greedy"]) == pytest.approx(1 - 1 / novel, abs=0.005)
    assert cell_value(rows["all"]["same reply as greedy"]) == pytest.approx(1 - 1 / len(results.questions), abs=0.005)
    assert int(rows["all"]["questions"]) == len(results.questions)


def test_a_peer_reply_that_differs_from_greedy_is_no_llma_mismatch(shipped):
    results = with_peer(shipped, 60.0, {q.question for q in shipped.questions})  # every reply differs
    assert results.llma_mismatches() == [] and mismatch_warning(results) == ""
    passed = {name: t.passed for name, t in compute_targets(results).items()}
    assert passed == {name: t.passed for name, t in compute_targets(shipped).items()}


def test_a_saved_run_with_peers_loads_back(shipped, tmp_path):
    results = with_peer(shipped, 60.0, set())
    results.save(tmp_path / "results.json")
    again = load(tmp_path / "results.json")
    assert again.peer_methods() == [PEER] and again.machine.llama_cpp == "0.3.16"
    assert render_markdown(again, []) == render_markdown(results, [])


@pytest.mark.slow
@pytest.mark.skipif(not HAS_LLAMA_CPP, reason="llama-cpp-python is not installed (optional: make bench BENCH_PEERS=1)")
def test_llama_cpp_decodes_the_bundled_gguf_greedily_and_deterministically():
    from transformers import AutoTokenizer

    from bench.peers import LlamaCppGreedy
    from decoding.model_loading import DEFAULT_MODEL_DIR, bundled_gguf_path

    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)
    messages = [{"role": "user", "content": "How do I reset my password?"}]
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    prompt_ids = list(encoded["input_ids"])
    peer = LlamaCppGreedy(bundled_gguf_path(), threads=2)
    assert peer.vocab_size == len(tokenizer)  # the same vocabulary the engine's token ids index
    first = peer.generate(prompt_ids, 8, tokenizer.eos_token_id)
    assert len(first) == 8 and all(isinstance(t, int) and 0 <= t < peer.vocab_size for t in first)
    assert peer.generate(prompt_ids, 8, tokenizer.eos_token_id) == first  # no state carried between replies
    stop = first[2]
    assert peer.generate(prompt_ids, 8, stop) == first[: first.index(stop) + 1]  # stops at EOS, keeping it
