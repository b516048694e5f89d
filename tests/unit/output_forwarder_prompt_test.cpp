// output_forwarder's prompts: a rank's partial line is shown on the terminal after a quiet time,
// and never cut: not while other ranks write on, not while the destination is stalled.
#include "io/output_forwarder.hpp"

#include "io/output_format.hpp"
#include "pm/error.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/output_files.hpp"

namespace {

namespace fs = std::filesystem;
using pm::output_stream;
using namespace output_forwarder_support;

// ---- prompts: a partial line shown after a quiet time ------------------------------------------

// A pipe whose write end the test holds, so that it decides when bytes come and when they end.
struct held_pipe {
  int read_fd = -1, write_fd = -1;
  held_pipe() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) == 0) {
      read_fd = p[0];
      write_fd = p[1];
    }
  }
  void put(const std::string& s) {
    EXPECT_EQ(::write(write_fd, s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  void close() {
    if (write_fd >= 0) ::close(write_fd);
    write_fd = -1;
  }
  ~held_pipe() { close(); }
};

TEST(OutputForwarder, APromptIsShownAfterAQuietTimeAndItsLineIsNeverCut) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.stdout_fd = open_file(path);
  opt.output_dir = dir.file("files");
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 2);
  held_pipe prompt, other;
  fwd.attach(0, output_stream::out, prompt.read_fd, nullptr);
  fwd.attach(1, output_stream::out, other.read_fd, nullptr);
  prompt.put("Name: ");
  io.run_for(std::chrono::milliseconds(300));
  EXPECT_EQ(slurp(path), "Name: ");  // shown, though no newline came (printf "Name: "; read x)
  other.put("rank 1 says hi\n");     // held: it would cut the prompt's line
  io.run_for(std::chrono::milliseconds(100));
  EXPECT_EQ(slurp(path), "Name: ");
  prompt.put("Bob\n");
  prompt.close();
  other.close();
  bool drained = false;
  fwd.async_drain([&] { drained = true; });
  io.run_for(std::chrono::seconds(10));
  EXPECT_TRUE(drained);
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(path), "Name: Bob\nrank 1 says hi\n");
  // Per-rank files get whole lines, as always.
  EXPECT_EQ(slurp(pm::io::rank_directory(opt.output_dir, 0, 2) + "/stdout"), "Name: Bob\n");
}

TEST(OutputForwarder, APartialLineWaitsWhileOtherRanksWriteOn) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.stdout_fd = open_file(path);
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 2);
  held_pipe slow, busy;
  fwd.attach(0, output_stream::out, slow.read_fd, nullptr);
  fwd.attach(1, output_stream::out, busy.read_fd, nullptr);
  slow.put("the middle of a line ");  // descheduled here, the others keep writing
  std::string expected_busy;
  for (int i = 0; i < 10; ++i) {
    const std::string line = "busy " + std::to_string(i) + "\n";
    busy.put(line);
    expected_busy += line;
    io.run_for(std::chrono::milliseconds(30));  // shorter than the quiet time
  }
  EXPECT_EQ(slurp(path), expected_busy);  // the partial line was not shown
  slow.put("ends here\n");
  slow.close();
  busy.close();
  fwd.async_drain([] {});
  io.run_for(std::chrono::seconds(10));
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(path), expected_busy + "the middle of a line ends here\n");
}

TEST(OutputForwarder, ALineWrittenInQuickPiecesIsNotShownBeforeItsEnd) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.stdout_fd = open_file(path);
  opt.partial_line_delay = std::chrono::milliseconds(200);
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 1);
  held_pipe p;
  fwd.attach(0, output_stream::out, p.read_fd, nullptr);
  for (int i = 0; i < 5; ++i) {
    p.put("piece" + std::to_string(i) + " ");
    io.run_for(std::chrono::milliseconds(60));  // pauses shorter than the quiet time
    EXPECT_EQ(slurp(path), "") << i;
  }
  p.put("end\n");
  p.close();
  fwd.async_drain([] {});
  io.run_for(std::chrono::seconds(10));
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(path), "piece0 piece1 piece2 piece3 piece4 end\n");
}

TEST(OutputForwarder, TaggedOutputKeepsAPartialLineUntilItEnds) {
  temp_dir dir;
  const std::string path = dir.file("out");
  pm::output_options opt;
  opt.stdout_fd = open_file(path);
  opt.tag = true;
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 1);
  held_pipe p;
  fwd.attach(0, output_stream::out, p.read_fd, nullptr);
  p.put("Name: ");
  io.run_for(std::chrono::milliseconds(300));
  EXPECT_EQ(slurp(path), "");  // a tag per piece would cut the line
  p.put("Bob\n");
  p.close();
  fwd.async_drain([] {});
  io.run_for(std::chrono::seconds(10));
  ::close(opt.stdout_fd);
  EXPECT_EQ(slurp(path), "[1,0]<stdout>:Name: Bob\n");
}

TEST(OutputForwarder, AStalledDestinationNeverShowsAPartialLineThatGoesOn) {
  // Every rank stops when the terminal stops reading: that quiet is the destination's, not a
  // prompt's. A line cut at a read boundary must not be shown early, or the lines that pile up
  // behind it would cut it (issue 11's tree tests saw 2 extra newlines after a 5 s stall).
  int dest[2];
  ASSERT_EQ(::pipe2(dest, O_CLOEXEC), 0);
  pm::output_options opt;
  opt.stdout_fd = dest[1];
  pm::io::forwarder_limits limits;
  limits.queue_limit = 64 << 10;
  boost::asio::io_context io;
  pm::io::output_forwarder fwd(io, opt, 2, limits);
  // Ranks on other hosts: their bytes come pushed, in pieces cut anywhere.
  fwd.open_stream(0, output_stream::out, nullptr);
  fwd.open_stream(1, output_stream::out, nullptr);
  std::string lines;
  for (int i = 0; lines.size() < (256u << 10); ++i)
    lines += "rank 1 line " + std::to_string(i) + "\n";
  fwd.push(1, output_stream::out, lines);  // more than the unread pipe and the queue take
  fwd.push(0, output_stream::out, std::string_view("the middle of a line "));
  io.run_for(std::chrono::milliseconds(300));  // the terminal reads nothing meanwhile
  fwd.push(1, output_stream::out, lines);
  fwd.push(0, output_stream::out, std::string_view("ends here\n"));
  fwd.close_stream(0, output_stream::out);
  fwd.close_stream(1, output_stream::out);
  bool drained = false;
  fwd.async_drain([&] { drained = true; });
  ::fcntl(dest[0], F_SETFL, O_NONBLOCK);
  std::string got;
  char buf[65536];
  for (int i = 0; i < 1000 && !drained; ++i) {
    io.run_for(std::chrono::milliseconds(5));
    for (ssize_t n; (n = ::read(dest[0], buf, sizeof buf)) > 0;)
      got.append(buf, static_cast<std::size_t>(n));
  }
  EXPECT_TRUE(drained);
  for (ssize_t n; (n = ::read(dest[0], buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  ::close(dest[0]);
  ::close(dest[1]);
  EXPECT_EQ(got.size(), 2 * lines.size() + std::string("the middle of a line ends here\n").size());
  EXPECT_NE(got.find("\nthe middle of a line ends here\n"), std::string::npos)
      << got.substr(got.find("the middle") - 40, 120);
  std::istringstream in(got);
  std::size_t count = 0;
  for (std::string line; std::getline(in, line); ++count) {
    EXPECT_TRUE(line.starts_with("rank 1 line ") || line == "the middle of a line ends here")
        << "cut: '" << line << "'";
  }
  EXPECT_EQ(count, 2 * static_cast<std::size_t>(std::count(lines.begin(), lines.end(), '\n')) + 1);
}
}  // namespace
