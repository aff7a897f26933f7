"""A lean forward for Llama-architecture models: fused, prepacked weights (decoding/packing.py), scripted layers
(decoding/layers.py) and preallocated KV caches, for one reply's rows or many replies' stacked in one forward.

For a 135M model on a CPU, transformers' forward spends more time in Python and in re-laying out weights
than in the products themselves (a one-token bf16 forward of SmolLM2: 26.3 ms there, 10.8 ms here, AMD EPYC
with 2 threads, docs/benchmark). This forward does the same arithmetic in a few calls per layer. Its logits are not
bit-identical to transformers' (other kernels, other summation orders), only to its own: greedy and LLMA both run
it, so LLMA equals this engine's greedy. tests/decoding/test_packed.py checks it against transformers in fp32
and, bit for bit, against itself in every row of a W-wide block.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .kv_pool import FreeCaches
from .layers import LaneBatch, LaneInputs, decoder_class, scripted
from .packing import ModelShape, Packer, head_format, settle_packing
from .prefix_cache import PrefixCache
from .weights import Weight

# Prompt chunks kept for reuse: the bundled model's keys and values take 23 KB a token in bf16, so 512 MB holds
# about 22,000 prompt tokens (every shipped help article's prompt some 30 times over).
DEFAULT_PREFIX_CACHE_BYTES = 512 * 2**20


@dataclass
class KvCache:
    """Keys and values of each layer, preallocated for `cache_len` positions: (1, kv_heads, cache_len, dim) each.

    Entries past what was accepted (a rejected draft, padding) stay until overwritten; the causal mask never
    lets a position see them, so rolling back is only moving where the next block is written.
    Once nothing refers to the KvCache its tensors go to the next reply of its length (decoding/kv_pool.py): keep the
    KvCache, not views of its tensors, for as long as they are read.
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def cache_len(self) -> int:
        return self.keys[0].shape[2]


@dataclass(frozen=True)
class Lane:
    """One reply's rows in a forward: tokens `ids` (T,) at positions start.. over its own cache and key count."""

    ids: torch.Tensor
    start: int
    cache: KvCache
    key_len: int

    def check_fits(self) -> None:
        end = self.start + self.ids.shape[0]
        if end > self.cache.cache_len or self.key_len > self.cache.cache_len:
            raise ValueError(f"positions {self.start}..{end} do not fit a cache of {self.cache.cache_len}")


class RotaryTables:
    """cos and signed sin (L, dim) for positions 0..L, from the model's own rotary module (any rope type), made
    again whenever a longer cache needs more: rotate_half(x) * sin == roll(x, half) * [-sin_first_half,
    sin_second_half], so the layers rotate with one addcmul."""

    def __init__(self, rotary: torch.nn.Module, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        self.rotary, self.half, self.dtype, self.device = rotary, head_dim // 2, dtype, device
        self.cos = self.sin = torch.empty(0)

    def cover(self, cache_len: int) -> None:
        if self.cos.shape[0] < cache_len:
            positions = torch.arange(cache_len, device=self.device)[None]
            probe = torch.zeros(1, dtype=self.dtype, device=self.device)
            cos, sin = self.rotary(probe, positions)  # (1, L, dim) in the model's dtype
            self.cos, self.sin = cos[0], torch.cat([-sin[0, :, : self.half], sin[0, :, self.half :]], -1)

    def rows(self, start: int, n_tokens: int, cache_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin (T, 1, dim) of positions start..start + T."""
        self.cover(cache_len)
        return self.cos[start : start + n_tokens, None], self.sin[start : start + n_tokens, None]


@dataclass(frozen=True)
class LayerStack:
    """Scripted layers and head in one weight format, with the rotary tables they have grown: the decode steps', and
    the prompts' where those run another format (replies of the int formats prefill dense)."""

    layers: torch.nn.Module  # DecoderLayers (decoding/layers.py), scripted
    head: Weight
    rotary: RotaryTables


class PackedLlama:
    """The model's weights, packed for fixed-width decode steps; runs forwards over a `KvCache`.

    Stands in for the model wherever the decode loops take one (`config`, `device`, `dtype` are the model's);
    `source` is the transformers model it was packed from and `packing` how (decoding/recipe.py). The choices
    left None are settled as this machine allows (decoding/packing.py, settle_packing).
    """

    def __init__(
        self, model: torch.nn.Module, *, weights: str = "dense", prefill_weights: str | None = None,
        lane_kernel: bool | None = None, prefill_attention: str | None = None, batched_attention: bool | None = None,
        lane_head: bool | None = None, prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES, width_hint: int = 8,
    ) -> None:
        self.packing = settle_packing(model, weights, prefill_weights, lane_kernel, prefill_attention,
                                      batched_attention, lane_head)
        self.source, self.shape = model, ModelShape.of(model)
        self.config, self.device, self.dtype = model.config, model.device, model.dtype
        self.embed = model.model.embed_tokens.weight.detach()
        self.norm = model.model.norm.weight.detach()
        packer, heads = Packer(model, width_hint), {}
        self.decode_part = self._stack(packer, heads, self.packing.weights, self.packing.attention)
        self.prompt_part = self.decode_part
        if self.packing.prefill_weights != self.packing.weights:
            self.prompt_part = self._stack(packer, heads, self.packing.prefill_weights, self.packing.prefill_attention)
        self.prefixes = PrefixCache(prefix_cache_bytes)  # chunks of this packing's prefills
        self._free_caches = FreeCaches()

    def _stack(self, packer: Packer, heads: dict[str, Weight], weights: str, attention: str) -> LayerStack:
        """Layers in `weights` attending by `attention`, and their head (one per format: a dense head is shared)."""
        layers = decoder_class(weights, attention)(packer.layers(weights), self.shape, self.device)
        head = head_format(weights, self.packing.lane_head)
        if head not in heads:
            heads[head] = packer.head(weights, self.packing.lane_head)
        rotary = RotaryTables(self.source.model.rotary_emb, self.shape.head_dim, self.dtype, self.device)
        return LayerStack(scripted(layers, self.device), heads[head], rotary)

    @property
    def weights(self) -> str:
        return self.packing.weights

    @property
    def prefill_weights(self) -> str:
        return self.packing.prefill_weights

    @property
    def prefill_attention(self) -> str:
        return self.packing.prefill_attention

    @property
    def lane_kernel(self) -> bool:
        return self.packing.attention == "kernel"

    def parameters(self):
        return self.source.parameters()

    @property
    def kv_bytes_per_token(self) -> int:
        """What one position's keys and values take in a cache (23 KB for the bundled model in bf16)."""
        return 2 * self.shape.layers * self.shape.kv_heads * self.shape.head_dim * self.embed.element_size()

    def new_cache(self, cache_len: int) -> KvCache:
        """A zeroed cache: a finished reply's where one of this length waits (decoding/kv_pool.py), else new.
        Zeros, not empty: masked keys still enter the products, and 0 x NaN would poison a row."""
        kept = self._free_caches.take(cache_len)
        if kept is None:
            shape = (1, self.shape.kv_heads, cache_len, self.shape.head_dim)  # SDPA's fast CPU kernel wants 4-d
            def zeros() -> list[torch.Tensor]:
                return [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.shape.layers)]
            with torch.inference_mode():  # every cache alike, new or kept: written under inference mode only
                kept = zeros(), zeros()
        cache = KvCache(*kept)
        self._free_caches.watch(cache, cache_len, *kept)
        return cache

    def prefill(self, ids: torch.Tensor, start: int, cache: KvCache, key_len: int, chunked: bool) -> torch.Tensor:
        """Logits (1, V) of the last of prompt tokens `ids` at positions start.., their keys and values written
        into `cache` by the prompts' layers (the same cache layout in every format). `chunked`: one chunk of a
        chunked prefill, attending over a copy of the keys (StepConfig.prefill_chunk)."""
        lane = Lane(ids, start, cache, key_len)
        return self._run(self.prompt_part, self.packing.prefill_attention, [lane], True, copy_keys=chunked)[0]

    def forward(
        self, ids: torch.Tensor, start: int, cache: KvCache, key_len: int, last_only: bool = False
    ) -> torch.Tensor:
        """Logits (T, V) of tokens `ids` (T,) at positions start.., writing their keys and values into `cache`.

        Every row attends over the first `key_len` keys, those past its own position masked. A row's sums
        change, in the last bits, with the number of keys (measured: SDPA on this CPU), so the caller keeps
        `key_len` a function of the row's position alone (StepConfig.key_len).
        """
        return self.forward_lanes([Lane(ids, start, cache, key_len)], last_only)[0]

    def forward_lanes(self, lanes: Sequence[Lane], last_only: bool = False) -> list[torch.Tensor]:
        """Logits of each lane's decode rows (T_i, V), or of its last row (1, V) with `last_only`.

        The layer products (q/k/v, o, gate/up, down, the head) run once over all lanes' rows stacked;
        attention runs per lane over its own cache with exactly the keys it would attend alone, or for every lane
        in one call, the padding masked (BatchedDecoderLayers: decode steps on CUDA). A forward
        of one lane is the single-reply forward, so a reply decoded alone and in company run the same code;
        that a row's products do not change with the stacked row count is measured (decoding/batch_probe.py).
        """
        return self._run(self.decode_part, self.packing.attention, lanes, last_only)

    @torch.inference_mode()
    def _run(
        self, part: LayerStack, attention: str, lanes: Sequence[Lane], last_only: bool = False, copy_keys: bool = False
    ) -> list[torch.Tensor]:
        """Logits of each lane's rows through `part`, attending as `attention` says (decoding/recipe.py)."""
        for lane in lanes:
            lane.check_fits()
        sizes = [lane.ids.shape[0] for lane in lanes]
        x = F.embedding(torch.cat([lane.ids for lane in lanes]) if len(lanes) > 1 else lanes[0].ids, self.embed)
        if attention == "batched":
            x = part.layers.forward_batched(x, self._lane_batch(part.rotary, lanes))  # (sum T_i, hidden)
        else:
            x = part.layers(x, self._lane_inputs(part.rotary, lanes, attention == "kernel", copy_keys))
        if last_only:
            x, sizes = x[torch.tensor(sizes).cumsum(0) - 1], [1] * len(lanes)
        if attention == "kernel":
            normed = torch.ops.llma.rms_norm(x.contiguous(), self.norm, self.shape.eps)
        else:
            normed = F.rms_norm(x, x.shape[-1:], self.norm, self.shape.eps)
        return list(part.head(normed).split(sizes))

    # --- what attention reads ----------------------------------------------------------------------

    def _lane_inputs(
        self, rotary: RotaryTables, lanes: Sequence[Lane], by_kernel: bool, copy_keys: bool
    ) -> LaneInputs:
        """The kernel takes positions and the whole rotary tables; SDPA each lane's rotary rows and masks."""
        cos, sin, masks = [], [], []
        if by_kernel:
            rotary.cover(max(lane.cache.cache_len for lane in lanes))
        for lane in lanes if not by_kernel else ():
            lane_cos, lane_sin = rotary.rows(lane.start, lane.ids.shape[0], lane.cache.cache_len)
            cos.append(lane_cos)
            sin.append(lane_sin)
            masks.append(self._lane_masks(lane))
        return LaneInputs(
            [lane.ids.shape[0] for lane in lanes], [lane.start for lane in lanes], [lane.key_len for lane in lanes],
            [lane.cache.keys for lane in lanes], [lane.cache.values for lane in lanes], by_kernel, cos, sin, masks,
            rotary.cos, rotary.sin, copy_keys,
        )

    def _lane_masks(self, lane: Lane) -> list[torch.Tensor]:
        """The lane's mask for each attention kind, its rows repeated for the q heads of a kv head."""
        n_tokens = lane.ids.shape[0]
        masks = [self._mask(lane.start, n_tokens, lane.key_len, window) for window in self.shape.windows]
        if n_tokens == 1:  # a lone row's query is asked twice (DecoderLayers.attend)
            masks = [mask.expand(2, -1) for mask in masks]
        group = self.shape.heads // self.shape.kv_heads
        return [mask.repeat(group, 1) for mask in masks]

    def _lane_batch(self, rotary: RotaryTables, lanes: Sequence[Lane]) -> LaneBatch:
        """The lanes as one attention batch (LaneBatch): its indices made on the host and sent in one copy."""
        sizes, starts = [lane.ids.shape[0] for lane in lanes], [lane.start for lane in lanes]
        query_len = max(2, *sizes)
        key_len = -(-max(lane.key_len for lane in lanes) // 16) * 16
        rotary.cover(max(lane.cache.cache_len for lane in lanes))
        first_rows = [sum(sizes[:j]) for j in range(len(lanes))]
        padded = [(j, min(t, size - 1)) for j, size in enumerate(sizes) for t in range(query_len)]
        query_rows = [first_rows[j] + t for j, t in padded]
        positions = [starts[j] + t for j, t in padded]  # (lanes * query_len,) a padded row repeats its lane's last
        real_rows = [j * query_len + t for j, size in enumerate(sizes) for t in range(size)]
        index = torch.tensor(query_rows + positions + real_rows, device=self.device)
        query_rows_t, positions_t, real_rows_t = index.split([len(query_rows), len(positions), len(real_rows)])
        row_positions = positions_t.index_select(0, real_rows_t)  # (N,)
        masks = [self._batch_mask(positions_t.view(len(lanes), query_len), key_len, w) for w in self.shape.windows]
        return LaneBatch(sizes, starts, query_len, key_len, rotary.cos[row_positions, None],
                         rotary.sin[row_positions, None], masks, query_rows_t, real_rows_t,
                         [lane.cache.keys for lane in lanes], [lane.cache.values for lane in lanes])

    def _batch_mask(self, positions: torch.Tensor, key_len: int, window: int | None) -> torch.Tensor:
        """(lanes, kv_heads, group * query_len, key_len) to add to the scores, as _mask for each lane's padded rows
        `positions` (lanes, query_len), repeated for the q heads of a kv head and broadcast over the kv heads."""
        lanes, query_len = positions.shape
        keys = torch.arange(key_len, device=self.device)
        hidden = keys > positions[:, :, None]  # (lanes, query_len, key_len)
        if window is not None:
            hidden |= keys <= positions[:, :, None] - window
        mask = torch.zeros(hidden.shape, dtype=self.dtype, device=self.device).masked_fill_(hidden, float("-inf"))
        group, kv_heads = self.shape.heads // self.shape.kv_heads, self.shape.kv_heads
        mask = mask[:, None].expand(lanes, group, query_len, key_len).reshape(lanes, 1, group * query_len, key_len)
        return mask.expand(lanes, kv_heads, group * query_len, key_len)  # the CUDA kernel wants every head

    def _mask(self, start: int, n_tokens: int, key_len: int, window: int | None) -> torch.Tensor:
        """(T, key_len) to add to the scores: 0 where row t sees the key (positions <= start + t, within the
        window), -inf elsewhere. SDPA turns a boolean mask into this on every call (same bits, measured)."""
        keys = torch.arange(key_len, device=self.device)
        positions = torch.arange(start, start + n_tokens, device=self.device)[:, None]
        hidden = keys > positions
        if window is not None:
            hidden |= keys <= positions - window
        return torch.zeros(hidden.shape, dtype=self.dtype, device=self.device).masked_fill_(hidden, float("-inf"))
