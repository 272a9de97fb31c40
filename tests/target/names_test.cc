// The names a target takes: subsystem NQNs as the Linux target takes them (without "nqn.", with
// a warning; refused with strict_nqn), within the checks that hold either way; serial numbers.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "target/config.h"

namespace sens::target {
namespace {

TEST(NqnNames, TakenWithoutThePrefixUnlessStrict) {
  TargetConfig c;
  c.subsystems.push_back({"blktests-subsystem-1", {"ram:1M"}, {}});
  apply_defaults(c);
  std::vector<std::string> warnings;
  EXPECT_EQ(validate(c, &warnings), "");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("'blktests-subsystem-1'"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("--strict-nqn"), std::string::npos) << warnings[0];

  c.strict_nqn = true;
  EXPECT_EQ(validate(c),
            "subsystem NQN 'blktests-subsystem-1' does not start with 'nqn.' "
            "(--strict-nqn)");

  // The other checks hold either way.
  c.strict_nqn = false;
  for (auto& [nqn, error] : std::vector<std::pair<std::string, std::string>>{
           {"", "subsystem NQN '' is empty"},
           {std::string(224, 'a'),
            "subsystem NQN '" + std::string(224, 'a') + "' is 224 bytes, at most 223 allowed"},
           {"bad\x01name", "subsystem NQN 'bad\\x01name' has a control character"},
           {"bad\xff", "subsystem NQN 'bad\\xff' is not UTF-8"},
           {"nqn.2014-08.org.nvmexpress.discovery",
            "the discovery NQN cannot name an I/O subsystem"}}) {
    c.subsystems[0].nqn = nqn;
    EXPECT_EQ(validate(c), error);
  }
  c.subsystems[0].nqn = std::string(223, 'a');
  EXPECT_EQ(validate(c), "");
  c.subsystems[0].nqn = "nqn.2026-12.io.example:caf\xc3\xa9";  // UTF-8
  warnings.clear();
  EXPECT_EQ(validate(c, &warnings), "");
  EXPECT_TRUE(warnings.empty());
}

TEST(NqnNames, SerialNumbers) {
  TargetConfig c;
  c.subsystems.push_back({"nqn.2026-12.io.example:a", {"ram:1M"}, {}});
  apply_defaults(c);
  c.subsystems[0].serial = "SN-0001";
  EXPECT_EQ(validate(c), "");
  c.subsystems[0].serial = std::string(21, '1');
  EXPECT_EQ(validate(c), "subsystem 'nqn.2026-12.io.example:a': serial '" + std::string(21, '1') +
                             "' is not 1..20 printable ASCII characters");
}

}  // namespace
}  // namespace sens::target
