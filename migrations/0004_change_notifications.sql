-- Instances cache sender states and API keys in process; these notifications tell every instance
-- to drop a copy that changed (the payload names the sender; API keys are dropped all at once).
CREATE FUNCTION sendguard_sender_state_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sendguard_senders', NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER senders_state_changed AFTER UPDATE OF state ON senders
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION sendguard_sender_state_changed();

CREATE FUNCTION sendguard_api_keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sendguard_api_keys', '');
    RETURN NULL;
END $$;
CREATE TRIGGER api_keys_changed AFTER UPDATE OR DELETE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION sendguard_api_keys_changed();
