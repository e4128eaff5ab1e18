-- Roles and disabled admins, idle-limited sessions, audit entries that carry the admin's id,
-- and who last changed a sender's state (a person, or 'system' for a rule's ban).
ALTER TABLE admins
    ADD COLUMN role text NOT NULL DEFAULT 'admin' CHECK (role IN ('admin', 'moderator')),
    ADD COLUMN disabled_at timestamptz;
-- 'system' names automatic decisions in the audit log.
ALTER TABLE admins ADD CONSTRAINT admins_username_not_system CHECK (lower(username) <> 'system');

ALTER TABLE admin_sessions ADD COLUMN last_seen_at timestamptz NOT NULL DEFAULT now();

ALTER TABLE audit_log ADD COLUMN admin_id bigint;

ALTER TABLE senders ADD COLUMN state_changed_by text;
