-- The role tenant requests read as (projections/tenancy.py): it sees the projections'
-- progress (for read-your-writes) and, of the API keys' use, its own tenant's rows.
-- Created unless it exists, and granted to the role migrating (who must be able to SET
-- ROLE to it): a superuser or a CREATEROLE role does both; any other role needs both done
-- for it once, by a superuser. projections/tenancy.py runs the same.
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'agency_reader') THEN
        BEGIN
            CREATE ROLE agency_reader NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN NULL;
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'role % may not create the role agency_reader', current_user
                    USING HINT = 'as a superuser: CREATE ROLE agency_reader NOLOGIN; GRANT '
                        'agency_reader TO ' || current_user || ' (docs/operations.md)';
        END;
    END IF;
    IF NOT pg_has_role(current_user, 'agency_reader', 'MEMBER') THEN
        BEGIN
            GRANT agency_reader TO CURRENT_USER;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role % may not read as agency_reader', current_user
                USING HINT = 'as a superuser: GRANT agency_reader TO ' || current_user
                    || ' (docs/operations.md)';
        END;
    END IF;
END $$;
GRANT USAGE ON SCHEMA public TO agency_reader;
GRANT SELECT ON agency_projection_checkpoints TO agency_reader;
ALTER TABLE agency_api_key_usage ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_rows ON agency_api_key_usage;
CREATE POLICY tenant_rows ON agency_api_key_usage FOR SELECT TO agency_reader
    USING (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT ON agency_api_key_usage TO agency_reader;
