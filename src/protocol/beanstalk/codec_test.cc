#include "protocol/beanstalk/codec.h"

#include <gtest/gtest.h>

#include <string>

#include "protocol/beanstalk/replies.h"

namespace delayd::beanstalk {
namespace {

Command P(std::string_view line) { return ParseCommand(line); }

bool BadFormat(std::string_view line) { return P(line).error == ParseError::kBadFormat; }

TEST(CodecTest, ParsesEveryCommand) {
  struct Case {
    const char* line;
    Op op;
  } cases[] = {
      {"put 1 2 3 4", Op::kPut},
      {"peek 5", Op::kPeek},
      {"peek-ready", Op::kPeekReady},
      {"peek-delayed", Op::kPeekDelayed},
      {"peek-buried", Op::kPeekBuried},
      {"reserve", Op::kReserve},
      {"reserve-with-timeout 3", Op::kReserveWithTimeout},
      {"reserve-job 9", Op::kReserveJob},
      {"delete 1", Op::kDelete},
      {"release 1 2 3", Op::kRelease},
      {"bury 1 2", Op::kBury},
      {"kick 10", Op::kKick},
      {"kick-job 3", Op::kKickJob},
      {"touch 4", Op::kTouch},
      {"stats", Op::kStats},
      {"stats-job 4", Op::kStatsJob},
      {"stats-tube t", Op::kStatsTube},
      {"use t", Op::kUse},
      {"watch t", Op::kWatch},
      {"ignore t", Op::kIgnore},
      {"list-tubes", Op::kListTubes},
      {"list-tube-used", Op::kListTubeUsed},
      {"list-tubes-watched", Op::kListTubesWatched},
      {"quit", Op::kQuit},
      {"pause-tube t 10", Op::kPauseTube},
  };
  for (const Case& c : cases) {
    Command cmd = P(c.line);
    EXPECT_EQ(cmd.op, c.op) << c.line;
    EXPECT_EQ(cmd.error, ParseError::kNone) << c.line;
    EXPECT_TRUE(cmd.counted) << c.line;
  }
}

TEST(CodecTest, PutFields) {
  Command c = P("put 4294967295 10 0 65535");
  EXPECT_EQ(c.priority, 4294967295u);
  EXPECT_EQ(c.delay_s, 10);
  EXPECT_EQ(c.ttr_s, 1) << "ttr 0 becomes 1 second";
  EXPECT_EQ(c.bytes, 65535u);
  EXPECT_FALSE(c.trailing_garbage);
  EXPECT_TRUE(P("put 1 2 3 4 x").trailing_garbage);
  EXPECT_EQ(P("put  1  2  3  4").error, ParseError::kNone) << "extra spaces are allowed";
}

TEST(CodecTest, MalformedNumbersAreBadFormat) {
  for (const char* line : {"put -1 0 1 1",
                           "put 4294967296 0 1 1",
                           "put 1 0 1",
                           "put 1 x 1 1",
                           "put +1 0 1 1",
                           "peek x",
                           "peek 1 ",
                           "peek -1",
                           "peek 18446744073709551616",
                           "delete",
                           "delete 1 x",
                           "release 1 2",
                           "release 1 2 3 4",
                           "bury 1",
                           "bury 1 2 3",
                           "touch",
                           "touch 1x",
                           "kick x",
                           "kick-job",
                           "stats-job -3",
                           "reserve-job 1.5"}) {
    Command c = P(line);
    if (std::string(line) == "delete" || std::string(line) == "touch" ||
        std::string(line) == "kick-job") {
      EXPECT_EQ(c.error, ParseError::kUnknownCommand) << line << ": no space, no match";
    } else {
      EXPECT_EQ(c.error, ParseError::kBadFormat) << line;
    }
  }
}

TEST(CodecTest, BareCommandsRefuseTrailingText) {
  for (const char* line :
       {"reserve ", "stats ", "list-tubes x", "peek-readyx", "list-tube-used "}) {
    EXPECT_TRUE(BadFormat(line)) << line;
  }
}

TEST(CodecTest, UnknownCommands) {
  for (const char* line : {"", "foo", "PUT 1 2 3 4", "peek", "kick", "puts 1"}) {
    EXPECT_EQ(P(line).error, ParseError::kUnknownCommand) << line;
  }
}

TEST(CodecTest, NulByteIsBadFormatBeforeAnythingElse) {
  EXPECT_TRUE(BadFormat(std::string_view("stats\0x", 7)));
  EXPECT_TRUE(BadFormat(std::string_view("a\0b", 3)));
}

TEST(CodecTest, TubeNames) {
  EXPECT_EQ(P("use a-b+c/d;e.f$g_h(i)0").tube, "a-b+c/d;e.f$g_h(i)0");
  EXPECT_TRUE(BadFormat("use -leading-dash"));
  EXPECT_TRUE(BadFormat("use sp ace"));
  EXPECT_TRUE(BadFormat("use  x")) << "a second space is part of the name";
  EXPECT_TRUE(BadFormat("watch tab\t"));
  EXPECT_TRUE(BadFormat("use " + std::string(201, 'a')));
  EXPECT_EQ(P("use " + std::string(200, 'a')).error, ParseError::kNone);
  EXPECT_TRUE(BadFormat("stats-tube "));
}

TEST(CodecTest, ReserveWithTimeoutIsLenientLikeStrtol) {
  EXPECT_EQ(P("reserve-with-timeout 5").timeout_s, 5);
  EXPECT_EQ(P("reserve-with-timeout x").timeout_s, 0) << "no digits reads as 0";
  EXPECT_EQ(P("reserve-with-timeout 7abc").timeout_s, 7);
  EXPECT_EQ(P("reserve-with-timeout -1").timeout_s, -1);
  EXPECT_TRUE(BadFormat("reserve-with-timeout 99999999999999999999"));
  EXPECT_EQ(P("reserve-with-timeout").error, ParseError::kBadFormat) << "matches 'reserve'";
}

TEST(CodecTest, KickIsLenientLikeStrtoul) {
  EXPECT_EQ(P("kick 5x").bound, 5u);
  EXPECT_EQ(P("kick -1").bound, 0xFFFFFFFFu);
  EXPECT_TRUE(BadFormat("kick "));
}

TEST(CodecTest, PauseTube) {
  Command c = P("pause-tube  x 30");
  EXPECT_EQ(c.tube, "x");
  EXPECT_EQ(c.delay_s, 30);
  EXPECT_TRUE(BadFormat("pause-tube x"));
  EXPECT_TRUE(BadFormat("pause-tube x y"));
  Command dash = P("pause-tube -x 3");
  EXPECT_EQ(dash.error, ParseError::kBadFormat);
  EXPECT_TRUE(dash.counted) << "beanstalkd counts it before checking the name";
}

TEST(CodecTest, QuitMatchesByPrefix) { EXPECT_EQ(P("quitnow").op, Op::kQuit); }

// A client retries OUT_OF_MEMORY later, as beanstalkd answers it when its
// binlog has no space; INTERNAL_ERROR is left for other store failures.
TEST(RepliesTest, StatusesMapToTheirProtocolReplies) {
  EXPECT_EQ(StatusReply(Status::Ok(), "DELETED\r\n"), "DELETED\r\n");
  EXPECT_EQ(StatusReply(Status::NotFound("x"), ""), "NOT_FOUND\r\n");
  EXPECT_EQ(StatusReply(Status::Conflict("x"), ""), "NOT_FOUND\r\n");
  EXPECT_EQ(StatusReply(Status::Unavailable("x"), ""), "DRAINING\r\n");
  EXPECT_EQ(StatusReply(Status::NoSpace("database or disk is full"), ""), "OUT_OF_MEMORY\r\n");
  EXPECT_EQ(StatusReply(Status::IoError("disk I/O error"), ""), "INTERNAL_ERROR\r\n");
}

}  // namespace
}  // namespace delayd::beanstalk
