"""Who is calling the Api: JWT sign-in (JWKS), single-use signed links, IAM callers."""
