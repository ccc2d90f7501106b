CREATE TABLE public.alert_groups (
    key text NOT NULL,
    source text NOT NULL,
    channel text NOT NULL,
    thread_ts text,
    run_id text,
    state text NOT NULL,
    status text,
    fingerprints text,
    summary text,
    repeat_noted integer DEFAULT 0,
    created_at double precision,
    updated_at double precision,
    payload text,
    root_item text,
    attempts integer,
    owner text,
    claimed_until double precision,
    occurrence integer,
    previous text,
    seen_at double precision
);
CREATE TABLE public.approvals (
    id text NOT NULL,
    run_id text,
    tool_use_id text,
    tool text,
    category text,
    args text,
    args_hash text,
    preview text,
    preview_hash text,
    requester text,
    channel text,
    thread_ts text,
    message_ts text,
    state text,
    required integer DEFAULT 1,
    approvals text DEFAULT '[]'::text,
    decided_by text,
    decided_name text,
    reason text,
    created_at double precision,
    expires_at double precision,
    decided_at double precision,
    run_tokens bigint,
    run_cost_usd double precision,
    cause text
);
CREATE TABLE public.change_events (
    id text NOT NULL,
    at double precision NOT NULL,
    source text,
    service text,
    environment text,
    summary text NOT NULL,
    url text,
    labels text,
    received_at double precision NOT NULL
);
CREATE TABLE public.events (
    event_id text NOT NULL,
    received_at double precision
);
CREATE TABLE public.feedback (
    id text NOT NULL,
    click text NOT NULL,
    run_id text NOT NULL,
    "user" text NOT NULL,
    value text NOT NULL,
    channel text,
    message_ts text,
    at double precision
);
CREATE TABLE public.inbox (
    id text NOT NULL,
    run_id text,
    channel text,
    ts text,
    "user" text,
    text text,
    state text,
    created_at double precision
);
CREATE TABLE public.incident_facets (
    run_id text NOT NULL,
    facet text NOT NULL,
    value text NOT NULL
);
CREATE TABLE public.incident_terms (
    term text NOT NULL,
    docs integer NOT NULL
);
CREATE TABLE public.incidents (
    run_id text NOT NULL,
    title text NOT NULL,
    task text,
    channel text NOT NULL,
    kind text NOT NULL,
    thread_ts text,
    permalink text,
    team text,
    started_at double precision,
    ended_at double precision NOT NULL,
    stop_reason text,
    targets text DEFAULT '{}'::text NOT NULL,
    targets_text text,
    labels text DEFAULT '{}'::text NOT NULL,
    changes text DEFAULT '[]'::text NOT NULL,
    answer text,
    feedback text DEFAULT 'none'::text NOT NULL,
    backfilled integer DEFAULT 0 NOT NULL,
    search_title text,
    search_targets text,
    search_body text,
    search tsvector GENERATED ALWAYS AS (((setweight(to_tsvector('simple'::regconfig, COALESCE(search_title, ''::text)), 'A'::"char") || setweight(to_tsvector('simple'::regconfig, COALESCE(search_targets, ''::text)), 'B'::"char")) || setweight(to_tsvector('simple'::regconfig, COALESCE(search_body, ''::text)), 'D'::"char"))) STORED
);
CREATE TABLE public.messages (
    run_id text NOT NULL,
    seq integer NOT NULL,
    role text,
    content text,
    created_at double precision
);
CREATE TABLE public.opsloop_migrations (
    name text NOT NULL,
    applied_at double precision
);
CREATE TABLE public.outbox (
    rowid bigint NOT NULL,
    id text NOT NULL,
    key text NOT NULL,
    kind text NOT NULL,
    run_id text,
    channel text NOT NULL,
    thread_ts text,
    target text,
    approval_id text,
    text text,
    blocks text,
    state text NOT NULL,
    ts text,
    attempts integer DEFAULT 0,
    unsure integer DEFAULT 0,
    plain integer DEFAULT 0,
    owner text,
    claimed_until double precision,
    next_at double precision,
    error text,
    created_at double precision,
    sent_at double precision
);
ALTER TABLE public.outbox ALTER COLUMN rowid ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.outbox_rowid_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);
CREATE TABLE public.runs (
    id text NOT NULL,
    channel text,
    thread_ts text,
    mention_ts text,
    requester text,
    task text,
    status text,
    model text,
    stop_reason text,
    stop_detail text,
    stopped_by text,
    output text,
    iterations integer DEFAULT 0,
    input_tokens bigint DEFAULT 0,
    output_tokens bigint DEFAULT 0,
    cache_read_tokens bigint DEFAULT 0,
    cache_write_tokens bigint DEFAULT 0,
    cost_usd double precision DEFAULT 0.0,
    agent_seconds double precision DEFAULT 0.0,
    condensed integer DEFAULT 0,
    tools_called text DEFAULT '[]'::text,
    status_ts text,
    stop_requested_by text,
    created_at double precision,
    updated_at double precision,
    system text,
    tools text,
    drop_block integer DEFAULT 0 NOT NULL,
    owner text,
    lease_until double precision,
    reported integer,
    team_id text,
    settings text,
    askers text,
    title text
);
CREATE TABLE public.steps (
    id bigint NOT NULL,
    run_id text,
    kind text,
    data text,
    at double precision
);
ALTER TABLE public.steps ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME public.steps_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);
CREATE TABLE public.streams (
    id text NOT NULL,
    run_id text NOT NULL,
    step integer,
    channel text NOT NULL,
    thread_ts text,
    ts text,
    state text NOT NULL,
    start_text text,
    sent text,
    final text,
    broken integer DEFAULT 0,
    created_at double precision,
    updated_at double precision
);
CREATE TABLE public.summaries (
    id text NOT NULL,
    run_id text NOT NULL,
    step integer NOT NULL,
    summary text NOT NULL,
    at double precision NOT NULL
);
CREATE TABLE public.tool_results (
    run_id text NOT NULL,
    tool_use_id text NOT NULL,
    tool text,
    args text,
    content text,
    is_error integer,
    confirmed_by text,
    created_at double precision
);
INSERT INTO public.change_events VALUES ('ev1', 100, NULL, 'api', NULL, 'deploy api v2', NULL, '{}', 1796485864.6241488);
INSERT INTO public.feedback VALUES ('fb_5b0a0baac5901a0e', 'c1', 'run_73c685f11479bbad', 'U2', 'positive', 'C1', '2.0', 1796485864.6225305);
INSERT INTO public.incident_terms VALUES ('', 1);
INSERT INTO public.incident_terms VALUES ('03', 1);
INSERT INTO public.incident_terms VALUES ('disk', 1);
INSERT INTO public.incident_terms VALUES ('full', 1);
INSERT INTO public.incident_terms VALUES ('logs', 1);
INSERT INTO public.incident_terms VALUES ('rotated', 1);
INSERT INTO public.incident_terms VALUES ('web', 1);
INSERT INTO public.incidents VALUES ('run_73c685f11479bbad', 'web-03 disk full', 'web-03 disk full', 'C1', 'public', '1.0', NULL, NULL, 1796485864.6089256, 1796485864.6137192, 'completed', '{"hosts": [], "clusters": [], "namespaces": [], "services": []}', '', '{}', '[]', 'rotated the logs', 'helpful', 0, 'web 03 disk full', '', 'web 03 disk full rotated logs', DEFAULT);
INSERT INTO public.opsloop_migrations VALUES ('m001_runs', 1796485864.5456326);
INSERT INTO public.opsloop_migrations VALUES ('m002_fixed_prompt', 1796485864.546637);
INSERT INTO public.opsloop_migrations VALUES ('m003_decision_cause', 1796485864.547536);
INSERT INTO public.opsloop_migrations VALUES ('m004_outbox', 1796485864.5519257);
INSERT INTO public.opsloop_migrations VALUES ('m005_leases', 1796485864.5577693);
INSERT INTO public.opsloop_migrations VALUES ('m006_reported', 1796485864.558344);
INSERT INTO public.opsloop_migrations VALUES ('m007_feedback', 1796485864.560626);
INSERT INTO public.opsloop_migrations VALUES ('m008_alerts', 1796485864.5649233);
INSERT INTO public.opsloop_migrations VALUES ('m009_alert_recovery', 1796485864.5693283);
INSERT INTO public.opsloop_migrations VALUES ('m010_streams', 1796485864.5713897);
INSERT INTO public.opsloop_migrations VALUES ('m011_run_settings', 1796485864.5721457);
INSERT INTO public.opsloop_migrations VALUES ('m012_askers', 1796485864.5777087);
INSERT INTO public.opsloop_migrations VALUES ('m013_feedback_once', 1796485864.5796373);
INSERT INTO public.opsloop_migrations VALUES ('m014_run_titles', 1796485864.5804);
INSERT INTO public.opsloop_migrations VALUES ('m015_incidents', 1796485864.5905519);
INSERT INTO public.opsloop_migrations VALUES ('m016_change_events', 1796485864.5976174);
INSERT INTO public.opsloop_migrations VALUES ('m017_summaries', 1796485864.5993862);
INSERT INTO public.opsloop_migrations VALUES ('m018_incident_terms', 1796485864.6055195);
INSERT INTO public.opsloop_migrations VALUES ('m019_alert_occurrences', 1796485864.6063244);
INSERT INTO public.runs VALUES ('run_73c685f11479bbad', 'C1', '1.0', '', 'U1', 'web-03 disk full', 'finished', 'm', 'completed', '', NULL, 'rotated the logs', 0, 0, 0, 0, 0, 0, 0, 0, '[]', NULL, NULL, 1796485864.6089256, 1796485864.6137192, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
SELECT pg_catalog.setval('public.outbox_rowid_seq', 1, false);
SELECT pg_catalog.setval('public.steps_id_seq', 1, false);
ALTER TABLE ONLY public.alert_groups
    ADD CONSTRAINT alert_groups_pkey PRIMARY KEY (key);
ALTER TABLE ONLY public.approvals
    ADD CONSTRAINT approvals_pkey PRIMARY KEY (id);
ALTER TABLE ONLY public.change_events
    ADD CONSTRAINT change_events_pkey PRIMARY KEY (id);
ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (event_id);
ALTER TABLE ONLY public.feedback
    ADD CONSTRAINT feedback_pkey PRIMARY KEY (id);
ALTER TABLE ONLY public.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (id);
ALTER TABLE ONLY public.incident_facets
    ADD CONSTRAINT incident_facets_pkey PRIMARY KEY (run_id, facet, value);
ALTER TABLE ONLY public.incident_terms
    ADD CONSTRAINT incident_terms_pkey PRIMARY KEY (term);
ALTER TABLE ONLY public.incidents
    ADD CONSTRAINT incidents_pkey PRIMARY KEY (run_id);
ALTER TABLE ONLY public.messages
    ADD CONSTRAINT messages_pkey PRIMARY KEY (run_id, seq);
ALTER TABLE ONLY public.opsloop_migrations
    ADD CONSTRAINT opsloop_migrations_pkey PRIMARY KEY (name);
ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);
ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);
ALTER TABLE ONLY public.steps
    ADD CONSTRAINT steps_pkey PRIMARY KEY (id);
ALTER TABLE ONLY public.streams
    ADD CONSTRAINT streams_pkey PRIMARY KEY (id);
ALTER TABLE ONLY public.summaries
    ADD CONSTRAINT summaries_pkey PRIMARY KEY (id);
ALTER TABLE ONLY public.tool_results
    ADD CONSTRAINT tool_results_pkey PRIMARY KEY (run_id, tool_use_id);
CREATE INDEX idx_alert_groups_channel_state_created_at ON public.alert_groups USING btree (channel, state, created_at);
CREATE INDEX idx_approvals_run_id_tool_use_id ON public.approvals USING btree (run_id, tool_use_id);
CREATE INDEX idx_approvals_state ON public.approvals USING btree (state);
CREATE INDEX idx_change_events_at ON public.change_events USING btree (at);
CREATE INDEX idx_change_events_received_at ON public.change_events USING btree (received_at);
CREATE INDEX idx_events_received_at ON public.events USING btree (received_at);
CREATE UNIQUE INDEX idx_feedback_channel_message_ts_user ON public.feedback USING btree (channel, message_ts, "user");
CREATE INDEX idx_feedback_click ON public.feedback USING btree (click);
CREATE INDEX idx_feedback_run_id ON public.feedback USING btree (run_id);
CREATE INDEX idx_inbox_run_id_state ON public.inbox USING btree (run_id, state);
CREATE INDEX idx_incident_facets_facet_value ON public.incident_facets USING btree (facet, value);
CREATE INDEX idx_incidents_channel ON public.incidents USING btree (channel);
CREATE INDEX idx_incidents_ended_at ON public.incidents USING btree (ended_at);
CREATE INDEX idx_incidents_search ON public.incidents USING gin (search);
CREATE UNIQUE INDEX idx_outbox_key ON public.outbox USING btree (key);
CREATE INDEX idx_outbox_rowid ON public.outbox USING btree (rowid);
CREATE INDEX idx_outbox_run_id ON public.outbox USING btree (run_id);
CREATE INDEX idx_outbox_state_next_at ON public.outbox USING btree (state, next_at);
CREATE INDEX idx_outbox_target ON public.outbox USING btree (target);
CREATE INDEX idx_runs_channel_thread_ts ON public.runs USING btree (channel, thread_ts);
CREATE INDEX idx_runs_status ON public.runs USING btree (status);
CREATE INDEX idx_steps_run_id ON public.steps USING btree (run_id);
CREATE INDEX idx_streams_run_id ON public.streams USING btree (run_id);
CREATE INDEX idx_summaries_run_id ON public.summaries USING btree (run_id);
ALTER TABLE ONLY public.incident_facets
    ADD CONSTRAINT incident_facets_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.incidents(run_id);
ALTER TABLE ONLY public.messages
    ADD CONSTRAINT messages_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id);
