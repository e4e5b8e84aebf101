-- A key is named by its tenant and its id: two tenants may hold the same id, and one's use
-- must never be written over the other's.
ALTER TABLE agency_api_key_usage DROP CONSTRAINT IF EXISTS agency_api_key_usage_pkey;
ALTER TABLE agency_api_key_usage ADD PRIMARY KEY (tenant_id, key_id);
