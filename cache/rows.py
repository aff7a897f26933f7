"""ORM rows turned into the plain records callers get, so no session-bound object leaves the cache."""

from cache.records import ArticleRecord, CachedAnswer, ReplyRecord
from cache.schema import Article, Entry, Reply


def cached_answer(entry: Entry) -> CachedAnswer:
    return CachedAnswer(
        id=entry.id,
        question=entry.question,
        normalized_question=entry.normalized_question,
        context=entry.context,
        context_key=entry.context_key,
        answer=entry.answer,
        answer_ids=list(entry.answer_ids),
        model_id=entry.model_id,
        prompt_hash=entry.prompt_hash,
        article_ids=list(entry.article_ids),
        stats=dict(entry.stats),
        review=entry.review,
        speedup=entry.speedup,
        created_at=entry.created_at,
        updated_at=entry.updated_at,
        last_used_at=entry.last_used_at,
        hits=entry.hits,
        uses=entry.uses,
    )


def reply_record(reply: Reply) -> ReplyRecord:
    return ReplyRecord(
        id=reply.id,
        entry_id=reply.entry_id,
        question=reply.question,
        answer=reply.answer,
        history=list(reply.history),
        stats=dict(reply.stats),
        speedup=reply.speedup,
        seconds=reply.seconds,
        greedy_seconds=reply.greedy_seconds,
        prompt_ids=list(reply.prompt_ids) if reply.prompt_ids is not None else None,
        token_ids=list(reply.token_ids) if reply.token_ids is not None else None,
        reference_entry_ids=list(reply.reference_entry_ids),
        exact_hit=reply.exact_hit,
        feedback=reply.feedback,
        feedback_reason=reply.feedback_reason,
        verified=reply.verified,
        measured_speedup=reply.measured_speedup,
        session_id=reply.session_id,
        created_at=reply.created_at,
        tokens_per_forward_pass=reply.tokens_per_forward_pass,
        stop_reason=reply.stop_reason,
        outcome=reply.outcome,
        outcome_reason=reply.outcome_reason or "",
    )


def article_record(article: Article) -> ArticleRecord:
    return ArticleRecord(article.id, article.title, article.body, article.created_at, article.updated_at)
