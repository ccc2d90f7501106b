BEGIN TRANSACTION;
CREATE TABLE "_sqlite_migrations" (
   "id" INTEGER PRIMARY KEY,
   "migration_set" TEXT,
   "name" TEXT,
   "applied_at" TEXT
);
INSERT INTO "_sqlite_migrations" VALUES(1,'opsloop','m001_runs','2026-12-05 15:51:01.967283+00:00');
INSERT INTO "_sqlite_migrations" VALUES(2,'opsloop','m002_fixed_prompt','2026-12-05 15:51:01.968308+00:00');
INSERT INTO "_sqlite_migrations" VALUES(3,'opsloop','m003_decision_cause','2026-12-05 15:51:01.968741+00:00');
INSERT INTO "_sqlite_migrations" VALUES(4,'opsloop','m004_outbox','2026-12-05 15:51:01.989832+00:00');
INSERT INTO "_sqlite_migrations" VALUES(5,'opsloop','m005_leases','2026-12-05 15:51:01.990599+00:00');
INSERT INTO "_sqlite_migrations" VALUES(6,'opsloop','m006_reported','2026-12-05 15:51:01.991047+00:00');
INSERT INTO "_sqlite_migrations" VALUES(7,'opsloop','m007_feedback','2026-12-05 15:51:01.991643+00:00');
INSERT INTO "_sqlite_migrations" VALUES(8,'opsloop','m008_alerts','2026-12-05 15:51:01.992203+00:00');
INSERT INTO "_sqlite_migrations" VALUES(9,'opsloop','m009_alert_recovery','2026-12-05 15:51:02.004459+00:00');
INSERT INTO "_sqlite_migrations" VALUES(10,'opsloop','m010_streams','2026-12-05 15:51:02.005533+00:00');
INSERT INTO "_sqlite_migrations" VALUES(11,'opsloop','m011_run_settings','2026-12-05 15:51:02.006024+00:00');
INSERT INTO "_sqlite_migrations" VALUES(12,'opsloop','m012_askers','2026-12-05 15:51:02.006465+00:00');
INSERT INTO "_sqlite_migrations" VALUES(13,'opsloop','m013_feedback_once','2026-12-05 15:51:02.006986+00:00');
INSERT INTO "_sqlite_migrations" VALUES(14,'opsloop','m014_run_titles','2026-12-05 15:51:02.007509+00:00');
INSERT INTO "_sqlite_migrations" VALUES(15,'opsloop','m015_incidents','2026-12-05 15:51:02.008602+00:00');
INSERT INTO "_sqlite_migrations" VALUES(16,'opsloop','m016_change_events','2026-12-05 15:51:02.009104+00:00');
INSERT INTO "_sqlite_migrations" VALUES(17,'opsloop','m017_summaries','2026-12-05 15:51:02.017721+00:00');
INSERT INTO "_sqlite_migrations" VALUES(18,'opsloop','m018_incident_terms','2026-12-05 15:51:02.018152+00:00');
INSERT INTO "_sqlite_migrations" VALUES(19,'opsloop','m019_alert_occurrences','2026-12-05 15:51:02.019563+00:00');
CREATE TABLE "alert_groups" (
   "key" TEXT PRIMARY KEY,
   "source" TEXT NOT NULL,
   "channel" TEXT NOT NULL,
   "thread_ts" TEXT,
   "run_id" TEXT,
   "state" TEXT NOT NULL,
   "status" TEXT,
   "fingerprints" TEXT,
   "summary" TEXT,
   "repeat_noted" INTEGER DEFAULT 0,
   "created_at" REAL,
   "updated_at" REAL
, "payload" TEXT, "root_item" TEXT, "attempts" INTEGER, "owner" TEXT, "claimed_until" REAL, "occurrence" INTEGER, "previous" TEXT, "seen_at" REAL);
CREATE TABLE "approvals" (
   "id" TEXT PRIMARY KEY,
   "run_id" TEXT,
   "tool_use_id" TEXT,
   "tool" TEXT,
   "category" TEXT,
   "args" TEXT,
   "args_hash" TEXT,
   "preview" TEXT,
   "preview_hash" TEXT,
   "requester" TEXT,
   "channel" TEXT,
   "thread_ts" TEXT,
   "message_ts" TEXT,
   "state" TEXT,
   "required" INTEGER DEFAULT 1,
   "approvals" TEXT DEFAULT '[]',
   "decided_by" TEXT,
   "decided_name" TEXT,
   "reason" TEXT,
   "created_at" REAL,
   "expires_at" REAL,
   "decided_at" REAL,
   "run_tokens" INTEGER,
   "run_cost_usd" REAL
, "cause" TEXT);
CREATE TABLE change_events (id TEXT PRIMARY KEY, at DOUBLE PRECISION NOT NULL, source TEXT, service TEXT, environment TEXT, summary TEXT NOT NULL, url TEXT, labels TEXT, received_at DOUBLE PRECISION NOT NULL);
INSERT INTO "change_events" VALUES('ev1',100.0,NULL,'api',NULL,'deploy api v2',NULL,'{}',1.79648586203369116788e+09);
CREATE TABLE "events" (
   "event_id" TEXT PRIMARY KEY,
   "received_at" REAL
);
CREATE TABLE "feedback" (
   "id" TEXT PRIMARY KEY,
   "click" TEXT NOT NULL,
   "run_id" TEXT NOT NULL,
   "user" TEXT NOT NULL,
   "value" TEXT NOT NULL,
   "channel" TEXT,
   "message_ts" TEXT,
   "at" REAL
);
INSERT INTO "feedback" VALUES('fb_a69ce27eb50db32f','c1','run_867c2f3e7c77a9d3','U2','positive','C1','2.0',1.79648586203337335591e+09);
CREATE TABLE "inbox" (
   "id" TEXT PRIMARY KEY,
   "run_id" TEXT,
   "channel" TEXT,
   "ts" TEXT,
   "user" TEXT,
   "text" TEXT,
   "state" TEXT,
   "created_at" REAL
);
CREATE TABLE incident_facets (
            run_id TEXT NOT NULL REFERENCES incidents (run_id), facet TEXT NOT NULL, value TEXT NOT NULL,
            PRIMARY KEY (run_id, facet, value));
CREATE TABLE incident_terms (term TEXT PRIMARY KEY, docs INTEGER NOT NULL);
INSERT INTO "incident_terms" VALUES('',1);
INSERT INTO "incident_terms" VALUES('03',1);
INSERT INTO "incident_terms" VALUES('disk',1);
INSERT INTO "incident_terms" VALUES('full',1);
INSERT INTO "incident_terms" VALUES('logs',1);
INSERT INTO "incident_terms" VALUES('rotated',1);
INSERT INTO "incident_terms" VALUES('web',1);
CREATE TABLE incidents (id INTEGER PRIMARY KEY, 
            run_id TEXT NOT NULL UNIQUE, title TEXT NOT NULL, task TEXT, channel TEXT NOT NULL, kind TEXT NOT NULL,
            thread_ts TEXT, permalink TEXT, team TEXT, started_at REAL, ended_at REAL NOT NULL, stop_reason TEXT,
            targets TEXT NOT NULL DEFAULT '{}', targets_text TEXT, labels TEXT NOT NULL DEFAULT '{}',
            changes TEXT NOT NULL DEFAULT '[]', answer TEXT, feedback TEXT NOT NULL DEFAULT 'none',
            backfilled INTEGER NOT NULL DEFAULT 0, search_title TEXT, search_targets TEXT, search_body TEXT);
INSERT INTO "incidents" VALUES(1,'run_867c2f3e7c77a9d3','web-03 disk full','web-03 disk full','C1','public','1.0',NULL,NULL,1.79648586202796220782e+09,1.79648586202848172185e+09,'completed','{"hosts": [], "clusters": [], "namespaces": [], "services": []}','','{}','[]','rotated the logs','helpful',0,'web 03 disk full','','web 03 disk full rotated logs');
CREATE VIRTUAL TABLE incidents_fts USING fts5(search_title, search_targets, search_body, content='incidents', content_rowid='id', tokenize='unicode61 remove_diacritics 0');
CREATE TABLE "messages" (
   "run_id" TEXT REFERENCES "runs"("id"),
   "seq" INTEGER,
   "role" TEXT,
   "content" TEXT,
   "created_at" REAL,
   PRIMARY KEY ("run_id", "seq")
);
CREATE TABLE "outbox" (
   "id" TEXT PRIMARY KEY,
   "key" TEXT NOT NULL,
   "kind" TEXT NOT NULL,
   "run_id" TEXT,
   "channel" TEXT NOT NULL,
   "thread_ts" TEXT,
   "target" TEXT,
   "approval_id" TEXT,
   "text" TEXT,
   "blocks" TEXT,
   "state" TEXT NOT NULL,
   "ts" TEXT,
   "attempts" INTEGER DEFAULT 0,
   "unsure" INTEGER DEFAULT 0,
   "plain" INTEGER DEFAULT 0,
   "owner" TEXT,
   "claimed_until" REAL,
   "next_at" REAL,
   "error" TEXT,
   "created_at" REAL,
   "sent_at" REAL
);
CREATE TABLE "runs" (
   "id" TEXT PRIMARY KEY,
   "channel" TEXT,
   "thread_ts" TEXT,
   "mention_ts" TEXT,
   "requester" TEXT,
   "task" TEXT,
   "status" TEXT,
   "model" TEXT,
   "stop_reason" TEXT,
   "stop_detail" TEXT,
   "stopped_by" TEXT,
   "output" TEXT,
   "iterations" INTEGER DEFAULT 0,
   "input_tokens" INTEGER DEFAULT 0,
   "output_tokens" INTEGER DEFAULT 0,
   "cache_read_tokens" INTEGER DEFAULT 0,
   "cache_write_tokens" INTEGER DEFAULT 0,
   "cost_usd" REAL DEFAULT 0.0,
   "agent_seconds" REAL DEFAULT 0.0,
   "condensed" INTEGER DEFAULT 0,
   "tools_called" TEXT DEFAULT '[]',
   "status_ts" TEXT,
   "stop_requested_by" TEXT,
   "created_at" REAL,
   "updated_at" REAL
, "system" TEXT, "tools" TEXT, "drop_block" INTEGER NOT NULL DEFAULT 0, "owner" TEXT, "lease_until" REAL, "reported" INTEGER, "team_id" TEXT, "settings" TEXT, "askers" TEXT, "title" TEXT);
INSERT INTO "runs" VALUES('run_867c2f3e7c77a9d3','C1','1.0','','U1','web-03 disk full','finished','m','completed','',NULL,'rotated the logs',0,0,0,0,0,0.0,0.0,0,'[]',NULL,NULL,1.79648586202796220782e+09,1.79648586202848172185e+09,NULL,NULL,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL);
CREATE TABLE "steps" (
   "id" INTEGER PRIMARY KEY,
   "run_id" TEXT,
   "kind" TEXT,
   "data" TEXT,
   "at" REAL
);
CREATE TABLE "streams" (
   "id" TEXT PRIMARY KEY,
   "run_id" TEXT NOT NULL,
   "step" INTEGER,
   "channel" TEXT NOT NULL,
   "thread_ts" TEXT,
   "ts" TEXT,
   "state" TEXT NOT NULL,
   "start_text" TEXT,
   "sent" TEXT,
   "final" TEXT,
   "broken" INTEGER DEFAULT 0,
   "created_at" REAL,
   "updated_at" REAL
);
CREATE TABLE summaries (id TEXT PRIMARY KEY, run_id TEXT NOT NULL, step INTEGER NOT NULL, summary TEXT NOT NULL, at DOUBLE PRECISION NOT NULL);
CREATE TABLE "tool_results" (
   "run_id" TEXT,
   "tool_use_id" TEXT,
   "tool" TEXT,
   "args" TEXT,
   "content" TEXT,
   "is_error" INTEGER,
   "confirmed_by" TEXT,
   "created_at" REAL,
   PRIMARY KEY ("run_id", "tool_use_id")
);
CREATE UNIQUE INDEX "idx__sqlite_migrations_migration_set_name"
    ON "_sqlite_migrations" ("migration_set", "name");
CREATE INDEX "idx_runs_channel_thread_ts"
    ON "runs" ("channel", "thread_ts");
CREATE INDEX "idx_runs_status"
    ON "runs" ("status");
CREATE INDEX "idx_steps_run_id"
    ON "steps" ("run_id");
CREATE INDEX "idx_inbox_run_id_state"
    ON "inbox" ("run_id", "state");
CREATE INDEX "idx_approvals_run_id_tool_use_id"
    ON "approvals" ("run_id", "tool_use_id");
CREATE INDEX "idx_approvals_state"
    ON "approvals" ("state");
CREATE UNIQUE INDEX "idx_outbox_key"
    ON "outbox" ("key");
CREATE INDEX "idx_outbox_state_next_at"
    ON "outbox" ("state", "next_at");
CREATE INDEX "idx_outbox_target"
    ON "outbox" ("target");
CREATE INDEX "idx_outbox_run_id"
    ON "outbox" ("run_id");
CREATE INDEX "idx_events_received_at"
    ON "events" ("received_at");
CREATE INDEX "idx_feedback_run_id"
    ON "feedback" ("run_id");
CREATE INDEX "idx_alert_groups_channel_state_created_at"
    ON "alert_groups" ("channel", "state", "created_at");
CREATE INDEX "idx_streams_run_id"
    ON "streams" ("run_id");
CREATE INDEX "idx_feedback_click"
    ON "feedback" ("click");
CREATE UNIQUE INDEX "idx_feedback_channel_message_ts_user"
    ON "feedback" ("channel", "message_ts", "user");
CREATE INDEX idx_incidents_ended_at ON incidents (ended_at);
CREATE INDEX idx_incidents_channel ON incidents (channel);
CREATE INDEX idx_incident_facets_facet_value ON incident_facets (facet, value);
CREATE TRIGGER incidents_fts_insert AFTER INSERT ON incidents BEGIN INSERT INTO incidents_fts (rowid, search_title, search_targets, search_body) VALUES (new.id, new.search_title, new.search_targets, new.search_body); END;
CREATE TRIGGER incidents_fts_delete AFTER DELETE ON incidents BEGIN INSERT INTO incidents_fts (incidents_fts, rowid, search_title, search_targets, search_body) VALUES ('delete', old.id, old.search_title, old.search_targets, old.search_body); END;
CREATE TRIGGER incidents_fts_update AFTER UPDATE OF search_title, search_targets, search_body ON incidents BEGIN INSERT INTO incidents_fts (incidents_fts, rowid, search_title, search_targets, search_body) VALUES ('delete', old.id, old.search_title, old.search_targets, old.search_body); INSERT INTO incidents_fts (rowid, search_title, search_targets, search_body) VALUES (new.id, new.search_title, new.search_targets, new.search_body); END;
CREATE INDEX idx_change_events_at ON change_events (at);
CREATE INDEX idx_change_events_received_at ON change_events (received_at);
CREATE INDEX idx_summaries_run_id ON summaries (run_id);
CREATE INDEX idx_incidents_ranked ON incidents (id, kind, channel, feedback, ended_at, run_id);
INSERT INTO incidents_fts (incidents_fts) VALUES ('rebuild');
COMMIT;
