//! OAuth 2.1 resource server: bearer extraction and RFC 7662 introspection (contract §7). STUB — see issue 3.
