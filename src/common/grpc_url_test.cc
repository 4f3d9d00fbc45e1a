#include "common/grpc_url.h"

#include <gtest/gtest.h>

namespace delayd {
namespace {

TEST(GrpcUrlTest, ReadsHostAndPortOfEitherScheme) {
  auto u = ParseGrpcUrl("grpc://receiver.internal:50051");
  ASSERT_TRUE(u);
  EXPECT_FALSE(u->tls);
  EXPECT_EQ(u->host, "receiver.internal");
  EXPECT_EQ(u->port, 50051);
  EXPECT_EQ(u->authority, "receiver.internal:50051");
  u = ParseGrpcUrl("grpcs://10.1.2.3:443/");
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "10.1.2.3");
  u = ParseGrpcUrl("grpc://[::1]:9000");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->authority, "[::1]:9000");
  EXPECT_TRUE(IsGrpcUrl("grpc://x"));
  EXPECT_FALSE(IsGrpcUrl("http://x:1"));
}

TEST(GrpcUrlTest, RefusesWhatIsNotHostAndPort) {
  for (const char* bad : {"grpc://", "grpc://host", "grpc://host:", "grpc://host:0",
                          "grpc://host:65536", "grpc://host:50051/path", "grpc://host:50051?x=1",
                          "grpc://user@host:1", "grpc://:50051", "grpc://[::1]", "grpc://[::1:9000",
                          "grpc://[zz]:1", "grpc://ho st:1", "http://host:1", "grpc://host:1x"}) {
    EXPECT_FALSE(ParseGrpcUrl(bad)) << bad;
  }
}

TEST(GrpcUrlTest, MetadataNamesAreTokensGrpcDoesNotOwn) {
  EXPECT_EQ(GrpcMetadataNameFault("Authorization"), "");
  EXPECT_EQ(GrpcMetadataNameFault("x-tenant.id_2"), "");
  for (const char* bad : {"grpc-timeout", "Content-Type", "te", "x-trace-bin", "x y", "a:b", ""}) {
    EXPECT_NE(GrpcMetadataNameFault(bad), "") << bad;
  }
}

}  // namespace
}  // namespace delayd
