"""Which prompt beginnings the warm-up prefills within its budget (chatbot/warm.py), on the bundled tokenizer and
embedder with two approved answers of one article."""

from transformers import AutoTokenizer

from cache import AnswerCache, Embedder
from chatbot import ChatSettings, Seed
from chatbot.seed import seed_help_centre
from chatbot.warm import common_prefix, prompt_beginnings
from decoding.model_loading import DEFAULT_MODEL_DIR


def test_beginnings_of_one_article_count_as_shared_only_their_whole_chunks(tmp_path):
    """Two answers of one article share the article's chunks, but the chunk their beginnings part in is each one's
    own (each is kept up to its own end, StepConfig.prefill_break): the budget counts it twice."""
    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)
    embedder = Embedder.load()
    shipped = Seed.shipped()
    answers = [a for a in shipped.answers if a.article == "reset-password"][:2]
    cache = AnswerCache.open(tmp_path, embed=embedder.embed, dim=embedder.dim)
    try:
        seed_help_centre(cache, tokenizer, "m", Seed({"reset-password": shipped.articles["reset-password"]}, answers))
        settings = ChatSettings()
        first, second = prompt_beginnings(cache, tokenizer, "m", settings, 10**6, chunk=64)
        shared = common_prefix(first, second)
        whole = shared // 64 * 64
        assert len(answers) == 2 and whole < shared  # they part inside a chunk
        fits = len(first) + len(second) - whole
        assert len(prompt_beginnings(cache, tokenizer, "m", settings, fits, chunk=64)) == 2
        assert len(prompt_beginnings(cache, tokenizer, "m", settings, fits - 1, chunk=64)) == 1
        # Counted token by token, as before the chunks broke at a beginning's end, the second seemed to fit.
        assert len(prompt_beginnings(cache, tokenizer, "m", settings, fits - 1)) == 2
    finally:
        cache.close()
