// The rbd:POOL/IMAGE[,KEY=VALUE...] syntax, checked without a cluster.
#include <gtest/gtest.h>

#include "storage/backends.h"
#include "storage/device.h"

namespace sens::storage {
namespace {

TEST(RbdSpec, ParsesPoolImageAndOptions) {
  RbdSpec s;
  std::string error;
  ASSERT_TRUE(parse_rbd_spec("rbd/disk0", &s, &error)) << error;
  EXPECT_EQ(s.pool, "rbd");
  EXPECT_EQ(s.image, "disk0");
  EXPECT_EQ(s.conf, "");
  EXPECT_EQ(s.id, "");
  EXPECT_EQ(s.timeout_s, 10u);
  EXPECT_EQ(s.op_timeout_s, 30u);
  EXPECT_EQ(s.qd, 128u);
  ASSERT_TRUE(parse_rbd_spec("p/i,conf=/etc/ceph/a=b.conf,id=client.gw,timeout=3,op_timeout=0,qd=7",
                             &s, &error))
      << error;
  EXPECT_EQ(s.conf, "/etc/ceph/a=b.conf");
  EXPECT_EQ(s.id, "gw");
  EXPECT_EQ(s.timeout_s, 3u);
  EXPECT_EQ(s.op_timeout_s, 0u);
  EXPECT_EQ(s.qd, 7u);
}

TEST(RbdSpec, RejectsEachMistakeByName) {
  struct Case {
    const char* rest;
    const char* why;
  } cases[] = {
      {"", "missing POOL/IMAGE"},
      {"rbd", "names no image"},
      {"/img", "empty pool name"},
      {"rbd/", "empty image name"},
      {"rbd/a/b", "image name 'a/b'"},
      {"rbd/img@snap", "snapshots are not served"},
      {"rbd/img,conf", "option 'conf' needs a value"},
      {"rbd/img,conf=", "needs a value"},
      {"rbd/img,id=client.", "names no user"},
      {"rbd/img,timeout=0", "timeout must be 1..300"},
      {"rbd/img,timeout=301", "timeout must be 1..300"},
      {"rbd/img,timeout=5s", "timeout must be 1..300"},
      {"rbd/img,op_timeout=-1", "op_timeout must be 0..3600"},
      {"rbd/img,qd=0", "qd must be 1..4096"},
      {"rbd/img,qd=4097", "qd must be 1..4096"},
      {"rbd/img,cache=on", "unknown option 'cache'"},
  };
  for (auto& c : cases) {
    RbdSpec s;
    std::string error;
    EXPECT_FALSE(parse_rbd_spec(c.rest, &s, &error)) << c.rest;
    EXPECT_NE(error.find(c.why), std::string::npos) << c.rest << ": " << error;
    EXPECT_EQ(error.rfind("rbd:", 0), 0u) << error;
    EXPECT_EQ(check_spec(std::string("rbd:") + c.rest), error);
  }
}

TEST(RbdSpec, CheckSpecKnowsTheKind) {
  EXPECT_EQ(check_spec("rbd:rbd/disk0"), rbd_supported() ? "" : check_spec("rbd:rbd/disk0"));
  if (!rbd_supported()) {
    EXPECT_NE(check_spec("rbd:rbd/disk0").find("built without librbd"), std::string::npos);
  }
  EXPECT_NE(check_spec("rados:x").find("rbd:POOL/IMAGE"), std::string::npos);
}

}  // namespace
}  // namespace sens::storage
