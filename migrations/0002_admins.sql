-- Admin accounts (argon2id hashes) and their sessions (only a hash of the cookie is stored).

CREATE TABLE admins (
    id            bigserial PRIMARY KEY,
    username      text NOT NULL UNIQUE CHECK (username ~ '^[A-Za-z0-9_.-]{1,64}$'),
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE admin_sessions (
    token_hash bytea PRIMARY KEY,
    admin_id   bigint NOT NULL REFERENCES admins (id) ON DELETE CASCADE,
    -- Every state-changing form carries this token.
    csrf_token text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX admin_sessions_expiry ON admin_sessions (expires_at);
