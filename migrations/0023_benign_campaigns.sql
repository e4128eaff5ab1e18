-- Every instance reads the benign campaigns every second (src/campaigns/known.rs). Without an
-- index that read was the whole campaigns table: 5.7 ms a read, 1.7% of Postgres's statement
-- time, after an hour of traffic at 1,000 invites/s (docs/PERFORMANCE.md). Few campaigns are
-- ever marked benign.
CREATE INDEX campaigns_benign ON campaigns (id) WHERE benign_at IS NOT NULL;
