"""Peers: another engine decoding the same model, for the report's optional peer row (`make bench BENCH_PEERS=1`).

llama-cpp-python compiles llama.cpp on install (about 10 minutes), so it is not in requirements.txt but in
requirements-peers.txt, and it is imported here alone, only when a run asks for peers.
"""

from pathlib import Path

PEER_INSTALL = "`make peers`, or `make bench BENCH_PEERS=1`, which install requirements-peers.txt"


class LlamaCppGreedy:
    """llama.cpp's greedy decoding of a GGUF file, fed token ids so it decodes exactly the prompt the others get."""

    def __init__(self, gguf: Path, threads: int) -> None:
        try:
            import llama_cpp
        except ImportError as err:
            raise RuntimeError(f"--peers needs llama-cpp-python: {PEER_INSTALL}") from err
        self.version = llama_cpp.__version__
        # n_ctx=0: the model's own context length, like the engine's limit; prompts are fed in 512-token batches.
        self.llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=0, n_threads=threads, n_threads_batch=threads,
                                   n_batch=512, verbose=False)

    @property
    def vocab_size(self) -> int:
        return self.llm.n_vocab()

    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos_token_id: int | None) -> list[int]:
        """Greedy tokens after the prompt, up to EOS (kept, as the engine keeps it) or the budget."""
        self.llm.reset()  # no prefix reuse from the previous call: every reply pays its prefill, like the engine's
        tokens: list[int] = []
        if max_new_tokens <= 0:
            return tokens
        for token in self.llm.generate(prompt_ids, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
            tokens.append(int(token))
            if token == eos_token_id or len(tokens) >= max_new_tokens:
                break
        return tokens
