-- Any writer, any shape (docs/design.md §2 "events", "Roles", "Adopting";
-- §3.1, §3.6): plain INSERTs that obey rule 1, the routing columns, and
-- the functions that adopt an outbox table that exists.
-- outboxkeeper:compatible (columns older code never reads, defaults it never reaches, the same functions with more optional arguments and result columns)
--
-- Older code keeps working on this schema: it names every column it
-- inserts (publish_batch gives sequence and xid, placeholders sequence and
-- filled_by) and every column it reads from read_events, and calls
-- publish with two or three arguments.

-- ---------------------------------------------------------------- routing
-- The columns a team coming from Debezium's outbox event router has:
-- optional, free text, NULL for placeholders. Nullable columns without a
-- default are added without rewriting the table; the constraint is NOT
-- VALID because every existing row has them NULL (validating would scan
-- the table under this ALTER's ACCESS EXCLUSIVE lock). New rows are
-- checked.
ALTER TABLE {{schema}}.events
    ADD COLUMN aggregate_type text,
    ADD COLUMN aggregate_id   text,
    ADD COLUMN event_type     text;
ALTER TABLE {{schema}}.events ADD CONSTRAINT events_placeholder_unrouted
    CHECK (filled_by IS NULL OR (aggregate_type IS NULL AND aggregate_id IS NULL AND event_type IS NULL)) NOT VALID;

-- ---------------------------------------------------------------- the allocator
-- The default of events.sequence: rule 1 (§3.1) for every INSERT that does
-- not name the sequence, whatever sends it (an ORM, sqlc, COPY, INSERT ...
-- SELECT, a view's trigger). The transaction's xid first — assigned here if
-- the transaction has none yet — then nextval, so a marker taken after the
-- allocation is newer than the allocating transaction. Called directly
-- (SELECT next_sequence()) it still takes the xid first: a writer holding a
-- sequence always holds an xid.
--
-- SECURITY DEFINER: the writer has no USAGE on the sequence (it may not
-- call nextval itself). No SET clause (it would cost every INSERT a
-- configuration change and its undoing, as in 0013): every name is
-- schema-qualified, the body uses no operator, and a DEFAULT expression is
-- bound by object id when it is set, whatever the inserting session's
-- search_path. PARALLEL UNSAFE (the default): assigning an xid cannot
-- happen in a parallel worker.
CREATE FUNCTION {{schema}}.next_sequence() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
    v_xid pg_catalog.xid8 := pg_catalog.pg_current_xact_id();  -- first: assigns the xid (§3.1)
BEGIN
    RETURN pg_catalog.nextval('{{schema}}.events_sequence_seq'::pg_catalog.regclass);
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.next_sequence() FROM PUBLIC;

-- The row stores the allocating transaction's xid (pg_current_xact_id()
-- returns the top-level xid, also inside a savepoint), as publish does.
-- Both defaults together make INSERT INTO events (topic, payload) a
-- publish; the writer may not name either column (grant_writer below).
ALTER TABLE {{schema}}.events
    ALTER COLUMN sequence SET DEFAULT {{schema}}.next_sequence(),
    ALTER COLUMN xid SET DEFAULT pg_catalog.pg_current_xact_id();

-- A placeholder never carries an xid (events_placeholder_is_empty), but
-- the placeholder inserts name only sequence and filled_by, so the xid
-- default fills it in. This clears it again, before the CHECK: only for
-- placeholders (filled_by set) whose xid is the default's — an xid given
-- explicitly is still refused by the CHECK. The WHEN clause is evaluated
-- without calling the function, so a real event pays nothing; its
-- operator and function were resolved here, with the migrator's pinned
-- search_path. The body names nothing.
CREATE FUNCTION {{schema}}.placeholder_without_xid() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.xid := NULL;
    RETURN NEW;
END
$$;
CREATE TRIGGER events_placeholder_without_xid
BEFORE INSERT ON {{schema}}.events
FOR EACH ROW
WHEN (NEW.filled_by IS NOT NULL AND NEW.xid = pg_catalog.pg_current_xact_id())
EXECUTE FUNCTION {{schema}}.placeholder_without_xid();

-- ---------------------------------------------------------------- publish
-- publish takes the routing columns as optional arguments, by name:
--   SELECT outbox.publish('order.placed', '{"id":7}', aggregate_type => 'order', aggregate_id => '7');
-- A new signature is a new function (publish(text, jsonb, jsonb) beside it
-- would make every two-argument call ambiguous), so the old one is
-- dropped; whoever was granted EXECUTE on it by hand is granted the new
-- one (saved in a transaction-local setting across the DROP), and the
-- writers through regrant_roles() at the end. The body is 0013's — xid
-- first, no SET clause, every name qualified, no operator — with the
-- three columns.
SELECT pg_catalog.set_config('outboxkeeper.migration_acl', coalesce(p.proacl::text, ''), true)
FROM pg_catalog.pg_proc p WHERE p.oid = '{{schema}}.publish(text, jsonb, jsonb)'::pg_catalog.regprocedure;

DROP FUNCTION {{schema}}.publish(text, jsonb, jsonb);

CREATE FUNCTION {{schema}}.publish(topic text, payload jsonb, headers jsonb DEFAULT NULL,
                                   aggregate_type text DEFAULT NULL, aggregate_id text DEFAULT NULL,
                                   event_type text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
    v_xid      pg_catalog.xid8 := pg_catalog.pg_current_xact_id();  -- first: assigns the xid (§3.1)
    v_sequence bigint;
BEGIN
    IF publish.topic IS NULL THEN
        RAISE EXCEPTION 'publish: topic must not be NULL';
    END IF;
    IF publish.payload IS NULL THEN
        RAISE EXCEPTION 'publish: payload must not be NULL';
    END IF;
    v_sequence := pg_catalog.nextval('{{schema}}.events_sequence_seq'::pg_catalog.regclass);
    INSERT INTO {{schema}}.events (sequence, xid, topic, payload, headers, aggregate_type, aggregate_id, event_type)
    VALUES (v_sequence, v_xid, publish.topic, publish.payload, publish.headers,
            publish.aggregate_type, publish.aggregate_id, publish.event_type);
    RETURN v_sequence;
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.publish(text, jsonb, jsonb, text, text, text) FROM PUBLIC;

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT a.grantee::regrole::text AS grantee, a.is_grantable
             FROM pg_catalog.aclexplode(nullif(pg_catalog.current_setting('outboxkeeper.migration_acl'), '')::pg_catalog.aclitem[]) AS a
             WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> 0
               AND a.grantee <> (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = {{schema_name}}) LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION {{schema}}.publish(text, jsonb, jsonb, text, text, text) TO %s%s',
            g.grantee, CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;

-- ---------------------------------------------------------------- read_events
-- read_events returns the routing columns too, after 0012's seven (a
-- caller that reads columns by position keeps its seven). A result type is
-- part of a function's identity: DROP and CREATE, its grants saved and
-- given back as for publish (the maintainer's, where a migration gave it
-- read_events, come back through regrant_roles() as well). The body is
-- 0012's query with the three columns; the settings are 0012's and 0015's.
SELECT pg_catalog.set_config('outboxkeeper.migration_acl', coalesce(p.proacl::text, ''), true)
FROM pg_catalog.pg_proc p WHERE p.oid = '{{schema}}.read_events(bigint, integer)'::pg_catalog.regprocedure;

DROP FUNCTION {{schema}}.read_events(bigint, integer);

CREATE FUNCTION {{schema}}.read_events(after bigint, max integer)
RETURNS TABLE (sequence bigint, xid xid8, topic text, payload jsonb, headers jsonb,
               recorded_at timestamptz, filled_by text,
               aggregate_type text, aggregate_id text, event_type text)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT p.sequence, p.xid, p.topic, p.payload, p.headers, p.recorded_at, p.filled_by,
           p.aggregate_type, p.aggregate_id, p.event_type
    FROM (
        SELECT e.*,
               count(*) FILTER (WHERE e.sequence > e.passed)
                   OVER (ORDER BY e.sequence ROWS UNBOUNDED PRECEDING) AS above
        FROM (
            SELECT ev.sequence, ev.xid, ev.topic, ev.payload, ev.headers,
                   ev.recorded_at, ev.filled_by, ev.aggregate_type, ev.aggregate_id, ev.event_type,
                   -- A scalar subquery: evaluated once per call.
                   greatest(coalesce(read_events.after, 0), 0,
                            coalesce((SELECT max(f.watermark) FROM {{schema}}.fill_state f), 0)) AS passed
            FROM {{schema}}.events ev
            WHERE ev.sequence > coalesce(read_events.after, 0)
            ORDER BY ev.sequence
            LIMIT least(greatest(coalesce(read_events.max, 0), 0), 10000)
        ) e
    ) p
    WHERE p.sequence <= p.passed OR p.sequence - p.passed = p.above
    ORDER BY p.sequence;
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.read_events(bigint, integer) FROM PUBLIC;

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT a.grantee::regrole::text AS grantee, a.is_grantable
             FROM pg_catalog.aclexplode(nullif(pg_catalog.current_setting('outboxkeeper.migration_acl'), '')::pg_catalog.aclitem[]) AS a
             WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> 0
               AND a.grantee <> (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = {{schema_name}}) LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION {{schema}}.read_events(bigint, integer) TO %s%s',
            g.grantee, CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;

-- ---------------------------------------------------------------- adopting
-- The INSERT of a view that replaces an adopted outbox table (adopt()
-- below): each row the application inserts into the old name becomes an
-- event. Its arguments, fixed by adopt() when it creates the trigger, map
-- the old table's columns: the id column (answered with the event's
-- sequence, so INSERT ... RETURNING id keeps working), the topic column
-- or a fixed topic, the payload column and whether it holds JSON as text,
-- then the optional headers, aggregate_type, aggregate_id and event_type
-- columns ('' for none).
--
-- The event is inserted without naming sequence or xid: the allocator
-- takes the writer's xid before it allocates (§3.1), whatever the writer
-- did before. SECURITY DEFINER, so the application keeps the rights it had
-- (INSERT on the old name) and needs none on this schema; its search_path
-- is pinned, since it uses operators. Not executable by PUBLIC: only its
-- owner can attach it to a view (CREATE TRIGGER needs EXECUTE).
CREATE FUNCTION {{schema}}.adopted_insert() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_row      jsonb := to_jsonb(NEW);
    v_topic    text;
    v_payload  jsonb;
    v_sequence bigint;
BEGIN
    v_topic := CASE WHEN TG_ARGV[1] <> '' THEN v_row ->> TG_ARGV[1] ELSE TG_ARGV[2] END;
    IF v_topic IS NULL OR v_topic = '' THEN
        RAISE EXCEPTION 'insert into %.%: the topic column % is empty; an event needs a topic', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[1]
            USING ERRCODE = 'not_null_violation';
    END IF;
    v_payload := v_row -> TG_ARGV[3];
    -- A text column holds the JSON document as a string: parse it (an
    -- invalid document fails the writer's INSERT, as the jsonb cast says).
    IF TG_ARGV[4] = 'text' AND jsonb_typeof(v_payload) = 'string' THEN
        v_payload := (v_payload #>> '{}')::jsonb;
    END IF;
    INSERT INTO {{schema}}.events (topic, payload, headers, aggregate_type, aggregate_id, event_type)
    VALUES (v_topic, v_payload,
            CASE WHEN TG_ARGV[5] <> '' THEN nullif(v_row -> TG_ARGV[5], 'null'::jsonb) END,
            CASE WHEN TG_ARGV[6] <> '' THEN v_row ->> TG_ARGV[6] END,
            CASE WHEN TG_ARGV[7] <> '' THEN v_row ->> TG_ARGV[7] END,
            CASE WHEN TG_ARGV[8] <> '' THEN v_row ->> TG_ARGV[8] END)
    RETURNING sequence INTO v_sequence;
    RETURN jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[0], v_sequence));
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.adopted_insert() FROM PUBLIC;

-- adopt() moves an application's outbox table under outboxkeeper in one
-- transaction (docs/adopting.md), or changes nothing and says why:
--  1. It locks the old table (ACCESS EXCLUSIVE: it waits for every
--     transaction that inserted into it, and holds back new inserts until
--     it commits; the caller bounds the wait with lock_timeout), and the
--     outbox's sequence (ALTER SEQUENCE waits for every transaction that
--     allocated from it). It checks, naming the input: an ordinary table
--     outside this schema, a single-column integer primary key drawn from
--     a sequence, the mapped columns and their types, the archive name
--     free, and an outbox nothing was ever published to.
--  2. The old table is renamed to the archive name; the old name becomes
--     a view of it, with the table's grants (columns' too), whose INSERT
--     publishes (adopted_insert). Old rows stay where they were, readable
--     and updatable through the view, so the old relay drains them
--     unchanged; no new row is ever added to them.
--  3. The outbox's sequence continues after the old one (after the highest
--     id and the old sequence's last value, N), so ids keep growing across
--     the switch, and the consumer (the relay's, by default relay:default)
--     is registered at N: it starts with the first event published through
--     the view, never an old row.
-- It returns what it did, as JSON. SECURITY INVOKER: the caller must own
-- the old table and this schema (the migrating login), and may create in
-- the old table's schema; not executable by PUBLIC.
CREATE FUNCTION {{schema}}.adopt(
    legacy                regclass,
    payload_column        text DEFAULT 'payload',
    topic_column          text DEFAULT 'topic',
    topic                 text DEFAULT NULL,
    headers_column        text DEFAULT NULL,
    aggregate_type_column text DEFAULT NULL,
    aggregate_id_column   text DEFAULT NULL,
    event_type_column     text DEFAULT NULL,
    consumer              text DEFAULT 'relay:default',
    archive_as            text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_nsp       name;
    v_name      name;
    v_kind      "char";
    v_archive   text;
    v_id        name;
    v_id_type   regtype;
    v_seq       text;
    v_seq_last  bigint;
    v_max_id    bigint;
    v_switch    bigint;
    v_rows      bigint;
    v_view      text;
    v_payload   text;
    v_type      regtype;
    v_col       text;
    v_columns   text[] := ARRAY[]::text[];
    v_acl       record;
BEGIN
    IF legacy IS NULL THEN
        RAISE EXCEPTION 'adopt: name the outbox table to adopt' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.relnamespace::regnamespace::name, c.relname, c.relkind INTO v_nsp, v_name, v_kind
    FROM pg_class c WHERE c.oid = legacy;
    IF v_kind IS DISTINCT FROM 'r' THEN
        RAISE EXCEPTION 'adopt: % is not an ordinary table (relkind %)', legacy, v_kind
            USING ERRCODE = 'wrong_object_type';
    END IF;
    IF v_nsp = {{schema_name}} THEN
        RAISE EXCEPTION 'adopt: % is in the outbox schema itself; adopt a table of the application''s', legacy
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_view := format('%I.%I', v_nsp, v_name);

    -- The lock first, so what is checked below is what is changed.
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_view);

    -- The id: a single-column integer primary key with a sequence.
    SELECT a.attname, a.atttypid::regtype INTO v_id, v_id_type
    FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
    WHERE i.indrelid = legacy AND i.indisprimary AND i.indnatts = 1;
    IF v_id IS NULL THEN
        RAISE EXCEPTION 'adopt: % has no single-column primary key: adopt expects an outbox table keyed by a bigserial id', legacy
            USING ERRCODE = 'invalid_table_definition';
    END IF;
    IF v_id_type NOT IN ('bigint'::regtype, 'integer'::regtype) THEN
        RAISE EXCEPTION 'adopt: %.% is %, not bigint or integer: adopt expects an outbox table keyed by a bigserial id', legacy, v_id, v_id_type
            USING ERRCODE = 'invalid_table_definition';
    END IF;
    v_seq := pg_get_serial_sequence(v_view, v_id);
    IF v_seq IS NULL THEN
        RAISE EXCEPTION 'adopt: %.% is not drawn from a sequence (bigserial or an identity column)', legacy, v_id
            USING ERRCODE = 'invalid_table_definition';
    END IF;

    -- The mapped columns, each present, and of a type the event can take.
    payload_column := nullif(payload_column, '');
    topic_column := nullif(topic_column, '');
    topic := nullif(topic, '');
    SELECT a.atttypid::regtype INTO v_type FROM pg_attribute a
    WHERE a.attrelid = legacy AND a.attname = payload_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF v_type IS NULL THEN
        RAISE EXCEPTION 'adopt: % has no payload column %', legacy, coalesce(payload_column, '(none given)')
            USING ERRCODE = 'undefined_column';
    ELSIF v_type IN ('jsonb'::regtype, 'json'::regtype) THEN
        v_payload := 'json';
    ELSIF v_type IN ('text'::regtype, 'character varying'::regtype) THEN
        v_payload := 'text';
    ELSE
        RAISE EXCEPTION 'adopt: payload column %.% is %: it must hold JSON (jsonb, json, or text with a JSON document)', legacy, payload_column, v_type
            USING ERRCODE = 'datatype_mismatch';
    END IF;
    IF topic IS NOT NULL THEN
        topic_column := NULL;
    ELSIF NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = legacy AND a.attname = topic_column
                      AND a.attnum > 0 AND NOT a.attisdropped) THEN
        RAISE EXCEPTION 'adopt: % has no topic column %: name the column that holds the topic, or give a fixed topic', legacy, coalesce(topic_column, '(none given)')
            USING ERRCODE = 'undefined_column';
    END IF;
    IF headers_column IS NOT NULL AND NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = legacy
            AND a.attname = headers_column AND a.atttypid IN ('jsonb'::regtype, 'json'::regtype) AND NOT a.attisdropped) THEN
        RAISE EXCEPTION 'adopt: % has no jsonb or json column % for the headers', legacy, headers_column
            USING ERRCODE = 'undefined_column';
    END IF;
    FOREACH v_col IN ARRAY ARRAY[aggregate_type_column, aggregate_id_column, event_type_column] LOOP
        IF v_col IS NOT NULL AND NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = legacy
                AND a.attname = v_col AND a.attnum > 0 AND NOT a.attisdropped) THEN
            RAISE EXCEPTION 'adopt: % has no column %', legacy, v_col USING ERRCODE = 'undefined_column';
        END IF;
    END LOOP;

    v_archive := coalesce(nullif(archive_as, ''), v_name || '_legacy');
    IF octet_length(v_archive) > 63 THEN
        RAISE EXCEPTION 'adopt: the archive name % is longer than 63 bytes; choose a shorter one', v_archive
            USING ERRCODE = 'name_too_long';
    END IF;
    IF to_regclass(format('%I.%I', v_nsp, v_archive)) IS NOT NULL THEN
        RAISE EXCEPTION 'adopt: %.% exists already; choose another archive name', v_nsp, v_archive
            USING ERRCODE = 'duplicate_table';
    END IF;

    -- The outbox: nothing ever allocated. ALTER SEQUENCE waits for every
    -- transaction that took a sequence and holds back new ones until this
    -- commits, so no publish can slip below the switch.
    ALTER SEQUENCE {{schema}}.events_sequence_seq CACHE 1;
    IF {{schema}}.allocation_head() <> 0 OR EXISTS (SELECT FROM {{schema}}.events) THEN
        RAISE EXCEPTION 'adopt: the outbox %.events has had events published already (allocation head %); adopt into a new outbox schema', {{schema_name}}, {{schema}}.allocation_head()
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    -- Where the old ids end.
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM %s', v_seq) INTO v_seq_last;
    EXECUTE format('SELECT max(%I)::bigint, count(*) FROM %s', v_id, v_view) INTO v_max_id, v_rows;
    v_switch := greatest(coalesce(v_max_id, 0), coalesce(v_seq_last, 0), 0);

    -- The switch.
    SELECT array_agg(format('%I', a.attname) ORDER BY a.attnum) INTO v_columns
    FROM pg_attribute a WHERE a.attrelid = legacy AND a.attnum > 0 AND NOT a.attisdropped;
    EXECUTE format('ALTER TABLE %s RENAME TO %I', v_view, v_archive);
    EXECUTE format('CREATE VIEW %s AS SELECT %s FROM %I.%I', v_view, array_to_string(v_columns, ', '), v_nsp, v_archive);
    -- The table's grants, on the view: every role that could insert, read
    -- or mark the old rows still can, through the old name.
    FOR v_acl IN SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee,
                        a.privilege_type, a.is_grantable
                 FROM pg_class c, aclexplode(c.relacl) a
                 WHERE c.oid = to_regclass(format('%I.%I', v_nsp, v_archive))
                   AND a.privilege_type IN ('SELECT', 'INSERT', 'UPDATE', 'DELETE') AND a.grantee <> c.relowner LOOP
        EXECUTE format('GRANT %s ON %s TO %s%s', v_acl.privilege_type, v_view, v_acl.grantee,
            CASE WHEN v_acl.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    FOR v_acl IN SELECT CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE x.grantee::regrole::text END AS grantee,
                        x.privilege_type, x.is_grantable, a.attname
                 FROM pg_attribute a, aclexplode(a.attacl) x
                 WHERE a.attrelid = to_regclass(format('%I.%I', v_nsp, v_archive)) AND a.attnum > 0
                   AND x.privilege_type IN ('SELECT', 'INSERT', 'UPDATE') LOOP
        EXECUTE format('GRANT %s (%I) ON %s TO %s%s', v_acl.privilege_type, v_acl.attname, v_view, v_acl.grantee,
            CASE WHEN v_acl.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    EXECUTE format('CREATE TRIGGER outboxkeeper_publish INSTEAD OF INSERT ON %s FOR EACH ROW '
                   'EXECUTE FUNCTION {{schema}}.adopted_insert(%L, %L, %L, %L, %L, %L, %L, %L, %L)',
        v_view, v_id, coalesce(topic_column, ''), coalesce(topic, ''), payload_column, v_payload,
        coalesce(headers_column, ''), coalesce(aggregate_type_column, ''), coalesce(aggregate_id_column, ''),
        coalesce(event_type_column, ''));

    IF v_switch > 0 THEN
        -- Transactional (a new relfilenode): a failure below undoes it.
        EXECUTE format('ALTER SEQUENCE {{schema}}.events_sequence_seq RESTART WITH %s', v_switch + 1);
    END IF;
    PERFORM {{schema}}.commit_position(consumer, v_switch);
    EXECUTE format('COMMENT ON VIEW %s IS %L', v_view,
        format('outboxkeeper adopted this outbox on %s: inserts publish to %s.events after sequence %s; the rows before the switch are in %I.%I',
               now(), {{schema_name}}, v_switch, v_nsp, v_archive));

    RETURN jsonb_build_object(
        'view', v_view, 'archive', format('%I.%I', v_nsp, v_archive), 'id_column', v_id,
        'legacy_max_id', coalesce(v_max_id, 0), 'switch_at', v_switch, 'consumer', consumer, 'legacy_rows', v_rows);
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.adopt(regclass, text, text, text, text, text, text, text, text, text) FROM PUBLIC;

-- ---------------------------------------------------------------- roles
-- The application's role, as in 0009, and now plain INSERTs: the payload
-- columns only (topic, payload, headers and the routing columns), so an
-- INSERT or COPY that names sequence, xid, recorded_at or filled_by is
-- refused by privilege, and what it does not name takes the defaults
-- above (rule 1). EXECUTE on the allocator, which the sequence's default
-- calls with the inserting role's rights. Still no USAGE or UPDATE on the
-- sequence (§3.6).
CREATE OR REPLACE FUNCTION {{schema}}.grant_writer(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA {{schema}} TO %s', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.publish(text, jsonb, jsonb, text, text, text), '
        '{{schema}}.publish_batch(text, jsonb[], jsonb), {{schema}}.next_sequence(), {{schema}}.allocation_head(), '
        '{{schema}}.read_events(bigint, integer), {{schema}}.commit_position(text, bigint) TO %s', grantee);
    EXECUTE format('GRANT SELECT ON SEQUENCE {{schema}}.events_sequence_seq TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT (topic, payload, headers, aggregate_type, aggregate_id, event_type) '
        'ON {{schema}}.events TO %s', grantee);
    EXECUTE format('GRANT SELECT (watermark) ON {{schema}}.fill_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT (recipient, kind, tenant_id, payload), '
        'UPDATE (state, attempts, delivered_at, acked_at) ON {{schema}}.deliveries TO %s', grantee);
    -- deliveries.id's default calls nextval on its own sequence.
    EXECUTE format('GRANT USAGE ON SEQUENCE {{schema}}.deliveries_id_seq TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'writer')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

SELECT {{schema}}.regrant_roles();
