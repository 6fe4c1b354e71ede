-- Takes the named lease, or renews it, when it is free, expired or already
-- :owner's. No row comes back when another owner holds it.
INSERT INTO ferry_lease (name, owner, expires_at)
VALUES (:name, :owner, :expires_at)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE ferry_lease.owner = excluded.owner OR ferry_lease.expires_at <= :now
RETURNING 1
