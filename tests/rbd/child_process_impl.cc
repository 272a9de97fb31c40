// tests/rbd is its own binary: it compiles the child-process helpers from tests/integration.
#include "../integration/child_process.cc"
