// The README's example program (examples/hello_host.cc), built against the installed interface
// only, runs against `sens target`; and the README shows that very program.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "../host/child.h"
#include "child_process.h"

namespace sens::testing {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Example, HelloHostWritesAndReadsBack) {
  host::testing::TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  RunResult r = run_command({SENS_HELLO_BINARY, t.trid()}, 60000);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("hello from namespace 1"), std::string::npos) << r.out << r.err;
  r = run_command(
      {SENS_HELLO_BINARY, "trtype:tcp traddr:127.0.0.1 trsvcid:1 subnqn:nqn.2026-11.x:y"}, 60000);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("connect: "), std::string::npos) << r.err;
}

TEST(Example, ReadmeShowsTheProgram) {
  const std::string readme = slurp(std::string(SENS_SOURCE_DIR) + "/README.md");
  std::string program = slurp(std::string(SENS_SOURCE_DIR) + "/examples/hello_host.cc");
  ASSERT_FALSE(program.empty());
  EXPECT_NE(readme.find(program), std::string::npos)
      << "README.md must show examples/hello_host.cc verbatim";
}

}  // namespace
}  // namespace sens::testing
