-- The statements of `outboxkeeper adopt` (adopt.go): what it reads before
-- it changes anything, and the switch, which is <schema>.adopt() of
-- migration 0019 (docs/adopting.md).

-- name: table_exists
-- Asked before the migrations are applied, so a mistyped table changes
-- nothing at all.
SELECT pg_catalog.to_regclass(@table) IS NOT NULL;

-- name: adopt
-- The whole switch in the caller's transaction: it locks the old table
-- (ACCESS EXCLUSIVE) and the outbox's sequence, checks, renames, creates
-- the view and its trigger, continues the sequence and registers the
-- consumer; it raises, changing nothing, when a check fails.
SELECT {{schema}}.adopt(
    legacy                => @table::regclass,
    payload_column        => @payload_column,
    topic_column          => @topic_column,
    topic                 => @topic,
    headers_column        => @headers_column,
    aggregate_type_column => @aggregate_type_column,
    aggregate_id_column   => @aggregate_id_column,
    event_type_column     => @event_type_column,
    consumer              => @consumer,
    archive_as            => @archive_as);
