"""The GPU check's dry run (bench/gpu_check.py), and the CUDA path's fixes it came with, checked on the CPU."""

import json
from types import SimpleNamespace

import pytest
import torch

from bench import gpu_check
from decoding import (
    Engine,
    LlmaOptions,
    PackedLlama,
    Scheduler,
    StepConfig,
    greedy_generate,
    layers,
    packing,
    scheduled_greedy,
)
from decoding.cost_model import machine_key, measure_company
from decoding.hardware import device_name, synchronize
from decoding.runners import HfRunner
from decoding.steps import ONE_TOKEN_STEPS
from tests.conftest import make_tiny_llama
from tests.threads import run_at_once


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    assert gpu_check.main(["--cpu-dry-run", "--out", str(out)]) == 0
    return json.loads((out / "report.json").read_text()), (out / "report.md").read_text()


def test_the_dry_run_has_every_section_none_failed_and_every_reply_equals_greedy(dry_run):
    report, markdown = dry_run
    sections = {entry["section"]: entry for entry in report["sections"]}
    assert set(sections) == set(gpu_check.SECTIONS)
    assert {name: entry["status"] for name, entry in sections.items()} == dict.fromkeys(gpu_check.SECTIONS, "ok")
    assert report["summary"]["bit_identical"] is True
    identity, shared = sections["identity"]["result"], sections["shared_forwards"]["result"]
    assert identity["identical"] == identity["cases"] == 4 * 3 * 2  # widths x reference kinds x policies
    assert shared["identical"] == shared["cases"] == 8
    assert identity["tokens_per_forward"]["oracle"] > 2  # the oracle reference was copied, not only checked
    assert identity["fewest_distinct_greedy_tokens"] > 1  # greedy does not repeat one token
    assert "identical to greedy alone: **True**" in markdown


def test_the_dry_run_through_batched_attention_keeps_every_reply_equal_to_greedy(monkeypatch, tmp_path):
    """The attention a GPU runs (one SDPA call for every reply of a shared forward) forced on the CPU."""
    monkeypatch.setattr(packing, "BATCHED_ATTENTION_DEVICES", ("cpu", "cuda"))
    monkeypatch.setattr(packing, "lane_kernel_refusal", lambda: "off for this test")
    assert gpu_check.main(["--cpu-dry-run", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    sections = {entry["section"]: entry for entry in report["sections"]}
    assert {entry["status"] for entry in sections.values()} == {"ok"}
    assert {engine["attention"] for engine in sections["engines"]["result"].values()} == {"batched"}
    assert report["summary"]["bit_identical"] is True


class DropsTheCache(torch.nn.Module):
    """A model whose forward names its cache `past_key_values`, as an older transformers': `cache=` is ignored."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.inner, self.config = model, model.config

    @property
    def device(self) -> torch.device:
        return self.inner.device

    def forward(self, input_ids, past_key_values=None, **kwargs):
        kwargs.pop("cache", None)  # unknown to it: taken into **kwargs, and read by nothing
        return self.inner(input_ids=input_ids, **kwargs)


@pytest.mark.parametrize("steps", [ONE_TOKEN_STEPS, StepConfig(4, cache_len=64)], ids=["dynamic", "static"])
def test_a_forward_that_drops_the_cache_fails_loudly_at_the_prefill(steps):
    model = make_tiny_llama()
    assert HfRunner(model, steps).prefill([3, 4, 5]).shape == (64,)  # a forward that reads cache= passes
    with pytest.raises(RuntimeError, match="kept 0 of the prompt's 3 positions"):
        HfRunner(DropsTheCache(model), steps).prefill([3, 4, 5])
    with pytest.raises(RuntimeError, match="does not read that keyword"):
        greedy_generate(DropsTheCache(model), [3, 4, 5], 4, steps=steps)


def test_synchronize_waits_on_cuda_only(monkeypatch):
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    synchronize("cpu")
    synchronize(torch.device("cuda", 0))
    assert waited == [torch.device("cuda", 0)]


def test_the_company_timing_synchronizes_around_each_forward(monkeypatch):
    from decoding import cost_model

    waited = []
    monkeypatch.setattr(cost_model, "synchronize", waited.append)
    model = PackedLlama(make_tiny_llama())
    measure_company(model, lanes=2, rows=2, repeats=3)
    assert waited == [model.device] * 6


def test_the_scheduler_synchronizes_before_it_reads_the_clock_around_a_shared_forward(monkeypatch):
    from decoding import scheduler as scheduler_module

    waited = []
    monkeypatch.setattr(scheduler_module, "synchronize", waited.append)
    model = PackedLlama(make_tiny_llama())
    steps, options = StepConfig(4, cache_len=64), LlmaOptions(6)
    scheduler = Scheduler(model, max_slots=2, gather_s=1.0)  # a long gather: both replies share each forward
    try:
        run_at_once([lambda i=i: scheduled_greedy(scheduler, [3 + i, 4, 5], options, steps) for i in range(2)], 60)
    finally:
        scheduler.close()
    assert len(waited) >= 2 * 5 and set(waited) == {model.device}  # before and after each of the shared steps


def test_on_cuda_the_engine_line_and_the_cost_key_name_the_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    tiny = make_tiny_llama()
    on_gpu = SimpleNamespace(config=tiny.config, parameters=tiny.parameters, device=torch.device("cuda", 0))
    assert device_name("cuda") == "NVIDIA H200" and device_name("cpu") != "NVIDIA H200"
    assert Engine.of(on_gpu, None, "tiny", step_width=4).describe().endswith("(NVIDIA H200)")
    assert "|cuda:0 NVIDIA H200|" in machine_key(on_gpu)
    assert "|cpu|" in machine_key(tiny)  # CPU keys as before: curves measured already still count


def test_scripting_layers_for_cuda_turns_torchscript_fusion_off(monkeypatch):
    switched = []
    monkeypatch.setattr(torch._C, "_jit_set_texpr_fuser_enabled", lambda on: switched.append(("texpr", on)))
    monkeypatch.setattr(torch._C, "_jit_override_can_fuse_on_gpu", lambda on: switched.append(("gpu", on)))
    layers.scripted(torch.nn.Identity(), torch.device("cpu"))
    assert switched == []
    layers.scripted(torch.nn.Identity(), torch.device("cuda"))
    assert switched == [("texpr", False), ("gpu", False)]


def test_a_failing_section_loses_nothing_else_and_the_time_guard_skips_the_rest(monkeypatch, tmp_path):
    def broken(run):
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(gpu_check, "SECTION_RUNS", {**dict.fromkeys(gpu_check.SECTIONS, lambda run: {"done": 1}),
                                                    "identity": broken})
    report = gpu_check.run_check(gpu_check.DRY_PLAN, tmp_path, time_limit_s=60)
    status = {entry["section"]: entry["status"] for entry in report["sections"]}
    assert status == {**dict.fromkeys(gpu_check.SECTIONS, "ok"), "identity": "error"}
    assert "broken on purpose" in (tmp_path / "report.md").read_text()
    skipped = gpu_check.run_check(gpu_check.DRY_PLAN, tmp_path, time_limit_s=0)
    assert {entry["status"] for entry in skipped["sections"]} == {"skipped"}
    assert skipped["summary"]["bit_identical"] is False
