-- How a launcher's replicas are reached, as a URL with `{name}` (the replica's name) and
-- `{port}` (its reserved port): a local launcher's host and port, a Kubernetes launcher's
-- Service names. Empty for launchers that announced themselves before this: host and port.
ALTER TABLE serving_launchers ADD COLUMN replica_url TEXT NOT NULL DEFAULT '';

-- Each replica's URL, fixed when its port is reserved (as the endpoints registered for it are).
ALTER TABLE served_ports ADD COLUMN url TEXT NOT NULL DEFAULT '';
UPDATE served_ports SET url = 'http://' || (SELECT g.host FROM serving_launchers g WHERE g.id = served_ports.launcher_id) || ':' || port || '/v1';
