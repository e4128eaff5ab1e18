-- Webhook secrets are sealed from now on: `webhook_secret` holds `sealed:v1:<base64>`, the
-- secret encrypted under a key derived from the service's secret key. A migration cannot seal
-- (it does not know the key): every instance seals the values still in clear when it starts.
--
-- `sendguard app rotate-webhook-secret` moves the current secret here, sealed as it was, and
-- both sign each delivery until `previous_webhook_secret_until` (24 hours later).
ALTER TABLE apps
    ADD COLUMN previous_webhook_secret text,
    ADD COLUMN previous_webhook_secret_until timestamptz;
