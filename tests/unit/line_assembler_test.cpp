// line_assembler: whatever the chunking, lines come out whole, in order, with nothing lost.
#include "io/line_assembler.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

struct event {
  std::string text;  // whole: prefix + body; piece: prefix + body
  bool whole;
  pm::line_flags flags;
};

struct recorder {
  std::vector<event> events;
  void whole(std::string_view prefix, std::string_view body) {
    events.push_back({std::string(prefix) + std::string(body), true, {}});
  }
  void piece(std::string_view prefix, std::string_view body, pm::line_flags f) {
    events.push_back({std::string(prefix) + std::string(body), false, f});
  }
  std::string joined() const {
    std::string s;
    for (const auto& e : events) s += e.text;
    return s;
  }
};

// Feeds `data` in the given chunk sizes (cycled) and finishes.
recorder run(const std::string& data, std::size_t max_line,
             const std::vector<std::size_t>& chunks) {
  pm::io::line_assembler a(max_line);
  recorder r;
  std::size_t pos = 0, i = 0;
  while (pos < data.size()) {
    const std::size_t n = std::min(chunks[i++ % chunks.size()], data.size() - pos);
    a.feed(std::string_view(data).substr(pos, n), r);
    pos += n;
  }
  a.finish(r);
  EXPECT_EQ(a.pending(), 0u);
  return r;
}

// What a reader of each line-by-line mode sees: the assembler's pieces, and its whole lines cut
// by for_each_line; "+" marks a piece the line goes on after.
std::vector<std::string> pieces_of(const recorder& r, std::size_t max_line) {
  std::vector<std::string> pieces;
  for (const auto& e : r.events) {
    if (!e.whole) {
      pieces.push_back(e.text + "+");
      continue;
    }
    pm::io::for_each_line(
        "", e.text, max_line, [&](std::string_view a, std::string_view b, pm::line_flags f) {
          pieces.push_back(std::string(a) + std::string(b) + (f.continued ? "+" : ""));
        });
  }
  return pieces;
}

TEST(LineAssembler, WholeLinesInOneCallUpToTheLastNewline) {
  pm::io::line_assembler a(100);
  recorder r;
  a.feed("one\ntwo\nthr", r);
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].text, "one\ntwo\n");
  EXPECT_EQ(a.pending(), 3u);
  a.feed("ee\nfo", r);
  ASSERT_EQ(r.events.size(), 2u);
  EXPECT_EQ(r.events[1].text, "three\n");
  a.finish(r);
  ASSERT_EQ(r.events.size(), 3u);
  EXPECT_EQ(r.events[2].text, "fo");
  EXPECT_FALSE(r.events[2].whole);
  EXPECT_TRUE(r.events[2].flags.partial);
  EXPECT_FALSE(r.events[2].flags.continued);
}

TEST(LineAssembler, ALineOfExactlyMaxLineBytesIsNotCut) {
  const auto r = run(std::string(10, 'a') + "\n", 10, {1});
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_TRUE(r.events[0].whole);
  EXPECT_EQ(r.events[0].text, std::string(10, 'a') + "\n");
}

TEST(LineAssembler, ALongerLineComesInMarkedPiecesOfMaxLineBytes) {
  // Whole lines are passed on uncut (plain mode writes them as they are); for_each_line cuts the
  // long ones for the line-by-line modes. Either way the pieces are the same for any chunking.
  const std::string line = std::string(10, 'a') + std::string(10, 'b') + "ccc\n";
  for (std::size_t chunk : {1u, 3u, 7u, 100u}) {
    const auto r = run(line, 10, {chunk});
    for (const auto& e : r.events) {
      if (e.whole) continue;
      EXPECT_TRUE(e.flags.continued);
      EXPECT_EQ(e.text.size(), 10u);
    }
    const auto pieces = pieces_of(r, 10);
    EXPECT_EQ(pieces, (std::vector<std::string>{"aaaaaaaaaa+", "bbbbbbbbbb+", "ccc"}))
        << "chunk " << chunk;
  }
}

// A cut never falls inside a UTF-8 character: the piece ends before it (--json-lines turned both
// halves of a cut 'é' into U+FFFD), for any chunking, in both paths; bytes that are not UTF-8
// are cut at max_line.
TEST(LineAssembler, ACutNeverSplitsAUtf8Character) {
  const std::string e_acute = "\xc3\xa9", euro = "\xe2\x82\xac", emoji = "\xf0\x9f\x98\x80";
  for (const auto& ch : {e_acute, euro, emoji}) {
    const std::string line = std::string(9, 'a') + ch + std::string(12, 'b') + "\n";
    for (std::size_t chunk : {1u, 2u, 5u, 9u, 10u, 100u}) {
      const auto pieces = pieces_of(run(line, 10, {chunk}), 10);
      ASSERT_GE(pieces.size(), 2u);
      EXPECT_EQ(pieces[0], std::string(9, 'a') + "+") << "chunk " << chunk;
      EXPECT_EQ(pieces[1].substr(0, ch.size()), ch) << "chunk " << chunk;
      std::string joined;
      for (auto p : pieces) joined += p.back() == '+' ? p.substr(0, p.size() - 1) : p;
      EXPECT_EQ(joined + "\n", line) << "chunk " << chunk;
    }
  }
  // Not UTF-8 (continuation bytes only): cut at max_line as before.
  const std::string binary = std::string(12, '\x80') + "\n";
  std::vector<std::size_t> sizes;
  pm::io::for_each_line("", binary, 10,
                        [&](std::string_view a, std::string_view b, pm::line_flags) {
                          sizes.push_back(a.size() + b.size());
                        });
  EXPECT_EQ(sizes, (std::vector<std::size_t>{10, 2}));
  // A character longer than max_line is cut (nothing else is possible), every piece at most it.
  std::vector<std::size_t> tiny;
  pm::io::for_each_line("", "\xf0\x9f\x98\x80\xf0\x9f\x98\x80\n", 3,
                        [&](std::string_view a, std::string_view b, pm::line_flags) {
                          tiny.push_back(a.size() + b.size());
                        });
  for (const auto n : tiny) EXPECT_LE(n, 3u);
  EXPECT_EQ(std::accumulate(tiny.begin(), tiny.end(), std::size_t{0}), 8u);
}

TEST(LineAssembler, KeepsAtMostMaxLineBytesOfAnUnterminatedLine) {
  pm::io::line_assembler a(10);
  recorder r;
  for (int i = 0; i < 100; ++i) {
    a.feed("xyz", r);
    ASSERT_LE(a.pending(), 10u);
  }
  EXPECT_EQ(r.joined().size() + a.pending(), 300u);
}

TEST(LineAssembler, ALongUnterminatedLastLineEndsWithAPartialPiece) {
  const auto r = run(std::string(25, 'x'), 10, {4});
  ASSERT_EQ(r.events.size(), 3u);
  EXPECT_TRUE(r.events[1].flags.continued);
  EXPECT_EQ(r.events[2].text, std::string(5, 'x'));
  EXPECT_TRUE(r.events[2].flags.partial);
}

TEST(LineAssembler, NothingInNothingOut) {
  const auto r = run("", 10, {1});
  EXPECT_TRUE(r.events.empty());
}

TEST(LineAssembler, AnyChunkingGivesBackEveryByteAndEveryLineWhole) {
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 300; ++trial) {
    std::string data;
    const int lines = static_cast<int>(rng() % 40);
    for (int l = 0; l < lines; ++l) {
      data += "L" + std::to_string(l) + ":" + std::string(rng() % 30, 'y');
      if (l + 1 < lines || rng() % 2) data += '\n';
    }
    std::vector<std::size_t> chunks;
    for (int c = 0; c < 5; ++c) chunks.push_back(1 + rng() % 50);
    const std::size_t max_line = 40;  // longer than every line: nothing is cut
    const auto r = run(data, max_line, chunks);
    ASSERT_EQ(r.joined(), data);
    for (const auto& e : r.events) {
      if (e.whole) {
        ASSERT_EQ(e.text.back(), '\n');
        ASSERT_EQ(e.text.front(), 'L');  // starts at a line start
      } else {
        ASSERT_TRUE(e.flags.partial);  // only the unterminated last line
        ASSERT_EQ(&e, &r.events.back());
      }
    }
  }
}

TEST(ForEachLine, SplitsWholeLinesAndCutsLongOnes) {
  std::vector<std::string> got;
  pm::io::for_each_line("ab", "cd\n\nefghijk\n", 4,
                        [&](std::string_view a, std::string_view b, pm::line_flags f) {
                          got.push_back(std::string(a) + std::string(b) + (f.continued ? "+" : ""));
                        });
  EXPECT_EQ(got, (std::vector<std::string>{"abcd", "", "efgh+", "ijk"}));
}

TEST(ForEachLine, APieceMayStraddleTheKeptTailAndTheChunk) {
  std::vector<std::string> got;
  pm::io::for_each_line(
      "abc", "defgh\n", 4, [&](std::string_view a, std::string_view b, pm::line_flags f) {
        got.push_back(std::string(a) + "|" + std::string(b) + (f.continued ? "+" : ""));
      });
  EXPECT_EQ(got, (std::vector<std::string>{"abc|d+", "|efgh"}));
}

}  // namespace
