//! FastCGI responder (streaming), CGI one-shot mode. STUB — in progress.
