"""Upgrading an older database: missing columns are added and filled once from the rows' stats JSON."""

from sqlalchemy import create_engine, text

from cache import NewReply


def test_a_new_timing_column_is_backfilled_from_old_rows(open_cache, tmp_path, store_url):
    data_dir = tmp_path / "data"
    old = open_cache(data_dir)
    old.record_reply(NewReply(question="q?", answer="a", stats={"tokens_per_forward_pass": 2.5}))
    old.close()
    engine = create_engine(store_url(data_dir))
    with engine.begin() as connection:  # the database as the release before the column left it
        connection.execute(text("ALTER TABLE replies DROP COLUMN tokens_per_forward_pass"))
    engine.dispose()
    upgraded = open_cache(data_dir)
    assert [point["tokens_per_forward_pass"] for point in upgraded.reply_series()] == [2.5]
