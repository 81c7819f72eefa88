-- commit_position bounds a consumer's name (docs/design.md §2, "The read side").
-- outboxkeeper:compatible (the same function and rights; it refuses more)
--
-- A name is the primary key of consumers, and a btree entry holds at most
-- about a third of a page: a 6,400-character name failed deep in the
-- insert with "index row size exceeds btree maximum" (SQLSTATE 54000),
-- which names neither the input nor the rule. A name is now at most 200
-- bytes (octet_length: measured as stored, whatever its script), refused
-- with invalid_parameter_value like the function's other refusals and
-- quoting the name's start. Otherwise the body is 0007's, restated whole
-- as CREATE OR REPLACE needs; that keeps the function's owner and grants
-- (0009: not PUBLIC; grant_writer's EXECUTE).
CREATE OR REPLACE FUNCTION {{schema}}.commit_position(name text, "position" bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_head   bigint;
    v_stored bigint;
BEGIN
    IF commit_position.name IS NULL OR commit_position.name = '' THEN
        RAISE EXCEPTION 'commit_position: the consumer name must not be empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(commit_position.name) > 200 THEN
        RAISE EXCEPTION 'commit_position: the consumer name "%..." is % bytes long, more than 200',
            left(commit_position.name, 40), octet_length(commit_position.name)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A consumer name is at most 200 bytes: name the consumer, not its configuration.';
    END IF;
    IF commit_position."position" IS NULL OR commit_position."position" < 0 THEN
        RAISE EXCEPTION 'commit_position: position % for consumer % must be 0 or more',
            coalesce(commit_position."position"::text, 'NULL'), commit_position.name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_head := {{schema}}.allocation_head();
    IF commit_position."position" > v_head THEN
        RAISE EXCEPTION 'commit_position: position % for consumer % is above the allocation head %',
            commit_position."position", commit_position.name, v_head
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A position is the sequence of the last event the consumer took.';
    END IF;
    INSERT INTO {{schema}}.consumers AS c (name, position)
    VALUES (commit_position.name, commit_position."position")
    ON CONFLICT (name) DO UPDATE
        SET position = GREATEST(c.position, excluded.position), updated_at = now()
    RETURNING c.position INTO v_stored;
    RETURN v_stored;
END
$$;
