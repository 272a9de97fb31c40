// tests/rbd is its own binary: it compiles the raw test client from tests/integration.
#include "../integration/raw_client.cc"
