-- Every team's runs on an endpoint share its limits, so they change only by an explicit edit
-- of the endpoint's owner (whoever first registered a checkpoint on it) or a lead.
ALTER TABLE endpoints ADD COLUMN created_by INTEGER REFERENCES users(id);

-- Endpoints registered before owners were kept: the registrant of their first checkpoint, as
-- its endpoint or else as a replica (none: only leads and admins edit them).
UPDATE endpoints SET created_by = COALESCE(
    (SELECT c.created_by FROM checkpoints c WHERE c.endpoint_id = endpoints.id ORDER BY c.id LIMIT 1),
    (SELECT c.created_by FROM checkpoint_replicas r JOIN checkpoints c ON c.id = r.checkpoint_id
      WHERE r.endpoint_id = endpoints.id ORDER BY c.id LIMIT 1));
