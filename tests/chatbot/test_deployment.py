"""Which forward a reply names, and the step width a deployment shares through its database."""

from pathlib import Path

import pytest
import torch
from argon2 import PasswordHasher
from transformers import AutoTokenizer

import chatbot.deployment as deployment
from cache import StaffStore
from cache.embedder import MODEL_NAME as EMBEDDING_BUNDLED
from chatbot import Accounts, AdminService, ChatService, ChatSettings, Seed
from chatbot.deployment import open_cache
from chatbot.stats import ReplyStats
from decoding import AUTO, ONE_TOKEN, CostCurve, Engine, PackedLlama, StepWidth, build_engine
from decoding.lane_kernel import lane_kernel_refusal
from decoding.model_loading import DEFAULT_MODEL_DIR
from tests.conftest import make_tiny_llama

CURVE = CostCurve(sizes=(1, 2), seconds=(0.1, 0.1))


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)


def test_step_width_zero_on_a_packable_model_says_transformers_in_every_reply(tmp_path: Path, tokenizer):
    engine = build_engine(make_tiny_llama(vocab_size=len(tokenizer)), tokenizer, "tiny", ONE_TOKEN)
    service = ChatService.open(engine, tmp_path, settings=ChatSettings.decoding_only(max_new_tokens=8), seed=Seed(),
                               cost=CURVE)
    reply = service.ask("How do I reset my password?")
    assert reply.stats.forward == "transformers" and reply.stats.step_width is None
    assert service.forward_name == "transformers"
    assert service.verify(reply.id).identical  # Verify reruns the same forward the label names


def test_the_first_replica_measures_the_width_and_every_later_one_uses_it(tmp_path: Path, monkeypatch, tokenizer):
    """Two starts on one database that would measure differently (as 4 and 8 on one Intel machine) agree."""
    measured = iter([8, 4])
    monkeypatch.setattr(deployment, "choose_step_width", lambda model, cost_file: next(measured))
    widths = []
    for replica in ("a", "b"):
        cache = open_cache(tmp_path / replica, f"sqlite:///{tmp_path / 'shared.db'}", 100, EMBEDDING_BUNDLED)
        chooser = deployment.shared_width_chooser(cache, tmp_path / replica / "curves.json", "tiny")
        widths.append(build_engine(make_tiny_llama(), tokenizer, "tiny", AUTO, chooser).step_width)
        cache.close()
    assert widths == [8, 8]
    assert next(measured) == 4  # the second replica measured nothing: the stored width was used


def test_the_dashboard_shows_the_deployments_width(tmp_path: Path, monkeypatch, tokenizer):
    monkeypatch.setattr(deployment, "choose_step_width", lambda model, cost_file: 4)
    cache = open_cache(tmp_path, None, max_entries=100, embedding_model=EMBEDDING_BUNDLED)
    engine = build_engine(make_tiny_llama(vocab_size=len(tokenizer)), tokenizer, "tiny", AUTO,
                          deployment.shared_width_chooser(cache, tmp_path / "curves.json", "tiny"))
    service = ChatService.start(engine, cache, tmp_path, ChatSettings.decoding_only(max_new_tokens=8), Seed(), CURVE)

    accounts = Accounts(StaffStore.open(tmp_path), PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))
    accounts.add("ada", "agent", "agent-password", actor="test")
    summary = AdminService(cache, service, accounts).engine_summary("ada")
    assert summary.step_width == summary.deployment_step_width == 4
    assert "packed forward" in summary.line and "4-wide decode steps" in summary.line


def test_the_first_replica_measures_the_weight_format_and_every_later_one_uses_it(tmp_path: Path, monkeypatch,
                                                                                  tokenizer):
    measured = iter(["int4", "int8"])
    monkeypatch.setattr(deployment, "choose_weights", lambda model, cost_file: next(measured))
    formats = []
    for replica in ("a", "b"):
        cache = open_cache(tmp_path / replica, f"sqlite:///{tmp_path / 'shared.db'}", 100, EMBEDDING_BUNDLED)
        chooser = deployment.shared_weights_chooser(cache, tmp_path / replica / "curves.json", "tiny")
        model = make_tiny_llama(vocab_size=len(tokenizer)).to(torch.bfloat16)
        formats.append(build_engine(model, tokenizer, "tiny", StepWidth.parse(4), weights="auto",
                                    choose_format=chooser).weights)
        cache.close()
    assert formats == ["int4", "int4"]
    assert next(measured) == "int8"  # the second replica measured nothing


def test_a_reply_names_its_weight_format_and_verifies_in_it_after_the_format_changed(tmp_path: Path, tokenizer):
    """Replies made in int4 stay verifiable on a restart in dense weights: Verify packs the model in the reply's
    format (their last bits differ between formats, so another format's greedy would not be a fair check)."""
    model = make_tiny_llama(vocab_size=len(tokenizer), seed=2).to(torch.bfloat16)
    settings = ChatSettings.decoding_only(max_new_tokens=12)
    replies = []
    for weights in ("int4", "dense"):
        engine = build_engine(model, tokenizer, "tiny", StepWidth.parse(4), weights=weights)
        service = ChatService.open(engine, tmp_path, settings=settings, seed=Seed(), cost=CURVE)
        replies.append(service.ask("How do I reset my password?"))
    assert [r.stats.weights for r in replies] == ["int4", "dense"]
    assert replies[0].text != replies[1].text  # the formats decode the same prompt apart: Verify must tell them
    assert all(service.verify(reply.id).identical for reply in replies)  # the dense service verifies both


def test_a_reply_prefilled_in_its_own_int_format_verifies_after_prefills_went_dense(tmp_path: Path, tokenizer):
    """Replies from before prefills ran dense (stats without prefill_weights) were prefilled in int4: Verify
    packs that combination for them, and the current one for new replies."""
    model = make_tiny_llama(vocab_size=len(tokenizer), seed=3).to(torch.bfloat16)
    settings = ChatSettings.decoding_only(max_new_tokens=12)
    older = Engine.of(PackedLlama(model, weights="int4", prefill_weights="int4"), tokenizer, "tiny", 4)
    service = ChatService.open(older, tmp_path, settings=settings, seed=Seed(), cost=CURVE)
    before = service.ask("How do I reset my password?")
    assert before.stats.prefill_weights == "int4"
    stored_before = {k: v for k, v in before.stats.to_json().items() if k != "prefill_weights"}
    assert ReplyStats.from_json(stored_before).prefill_weights == ""  # as replies stored before it: as `weights`
    engine = build_engine(model, tokenizer, "tiny", StepWidth.parse(4), weights="int4")
    assert engine.prefill_weights == "dense"
    service = ChatService.open(engine, tmp_path, settings=settings, seed=Seed(), cost=CURVE)
    after = service.ask("Can I change the email address of my account?", session_id="another")
    assert after.stats.prefill_weights == "dense" and not after.stats.exact_hit
    assert service.verify(before.id).identical and service.verify(after.id).identical


def test_a_reply_that_attended_through_sdpa_verifies_after_steps_moved_to_the_lane_kernel(tmp_path: Path, tokenizer):
    """Replies from before the lane kernel (stats without attention) attended through SDPA: Verify packs that
    forward for them, and the kernel's for new replies."""
    if lane_kernel_refusal() is not None:
        pytest.skip(lane_kernel_refusal())
    model = make_tiny_llama(vocab_size=len(tokenizer), seed=3).to(torch.bfloat16)
    settings = ChatSettings.decoding_only(max_new_tokens=12)
    older = Engine.of(PackedLlama(model, weights="int4", lane_kernel=False), tokenizer, "tiny", 4)
    service = ChatService.open(older, tmp_path, settings=settings, seed=Seed(), cost=CURVE)
    before = service.ask("How do I reset my password?")
    stored_before = {k: v for k, v in before.stats.to_json().items() if k != "attention"}
    assert ReplyStats.from_json(stored_before).attention == "sdpa"  # as replies stored before it
    engine = build_engine(model, tokenizer, "tiny", StepWidth.parse(4), weights="int4")
    assert engine.attention == "kernel"
    service = ChatService.open(engine, tmp_path, settings=settings, seed=Seed(), cost=CURVE)
    after = service.ask("Can I change the email address of my account?", session_id="another")
    assert after.stats.attention == "kernel" and not after.stats.exact_hit
    # the forward each reply reruns on (tokens of a 12-token reply may agree either way)
    assert not service._model_for(before.stats).lane_kernel and service._model_for(after.stats).lane_kernel
    assert service.verify(before.id).identical and service.verify(after.id).identical


def test_a_reply_prefilled_through_sdpa_verifies_after_prompts_moved_to_the_lane_kernel(tmp_path: Path, tokenizer):
    """Replies from before prompts attended through the lane kernel (stats without prefill_attention) were
    prefilled through SDPA: Verify prefills them so again, and new replies through the kernel."""
    if lane_kernel_refusal() is not None:
        pytest.skip(lane_kernel_refusal())
    model = make_tiny_llama(vocab_size=len(tokenizer), seed=3).to(torch.bfloat16)
    settings = ChatSettings.decoding_only(max_new_tokens=12)
    older = Engine.of(PackedLlama(model, weights="int4", prefill_attention="sdpa"), tokenizer, "tiny", 4)
    service = ChatService.open(older, tmp_path, settings=settings, seed=Seed(), cost=CURVE)
    before = service.ask("How do I reset my password?")
    assert before.stats.attention == "kernel" and before.stats.prefill_attention == "sdpa"
    stored_before = {k: v for k, v in before.stats.to_json().items() if k != "prefill_attention"}
    assert ReplyStats.from_json(stored_before).prefill_attention == "sdpa"  # as replies stored before it
    engine = build_engine(model, tokenizer, "tiny", StepWidth.parse(4), weights="int4")
    assert engine.prefill_attention == "kernel"
    service = ChatService.open(engine, tmp_path, settings=settings, seed=Seed(), cost=CURVE)
    after = service.ask("Can I change the email address of my account?", session_id="another")
    assert after.stats.prefill_attention == "kernel" and not after.stats.exact_hit
    assert service._model_for(before.stats).prefill_attention == "sdpa"
    assert service._model_for(after.stats) is engine.model
    assert service.verify(before.id).identical and service.verify(after.id).identical


def test_prompts_that_begin_alike_reuse_their_chunks_and_reply_as_computed_whole(tmp_path: Path, tokenizer):
    """The second customer's prompt starts with the first's system prompt: its chunks come from the prefix cache,
    the reply says so, Verify agrees, and a service whose cache is empty gives the very same reply."""
    model = make_tiny_llama(vocab_size=len(tokenizer), seed=5).to(torch.bfloat16)
    settings = ChatSettings.decoding_only(max_new_tokens=12)
    service = ChatService.open(Engine.of(PackedLlama(model), tokenizer, "tiny", 4), tmp_path / "a", settings=settings,
                               seed=Seed(), cost=CURVE)
    first = service.ask("How do I reset my password?")
    second = service.ask("Can I change the email address of my account?", session_id="another")
    assert first.stats.prefill_chunk == 64 and first.stats.prompt_reused == 0
    # All of its beginning (the system message: no article here), where its chunks broke off.
    assert second.stats.prompt_reused == second.stats.prefill_break > 0
    assert second.stats.prompt_tokens > second.stats.prompt_reused
    # What Verify reruns with is the chunking the reply had, break included.
    rerun = ReplyStats.from_json(second.stats.to_json()).steps()
    assert rerun.prefill_break == second.stats.prefill_break and rerun.prefill_chunk == 64
    assert rerun.cross_granules == (service.engine.attention == "kernel")
    assert service.verify(first.id).identical and service.verify(second.id).identical
    cold = ChatService.open(Engine.of(PackedLlama(model), tokenizer, "tiny", 4), tmp_path / "b", settings=settings,
                            seed=Seed(), cost=CURVE)
    alone = cold.ask("Can I change the email address of my account?")
    assert alone.stats.prompt_reused == 0 and alone.text == second.text
    older = {k: v for k, v in second.stats.to_json().items()
             if k not in ("prefill_chunk", "prefill_break", "prompt_reused")}
    assert ReplyStats.from_json(older).steps().prefill_chunk is None  # replies from before: one prefill forward
