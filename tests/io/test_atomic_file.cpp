// write_file_atomic and read_file: the target holds the old or the new content, never a mix, and no temporary
// file outlives a write, whether it succeeds or fails.
#include <doctest/doctest.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "io_test_util.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_io_atomic_file {

using namespace kiln;
using kiln::test::bytes_of;

TEST_CASE("write_file_atomic: creates and replaces files, leaving no temporary behind") {
  test::ScratchDir dir;
  io::write_file_atomic(dir / "f", bytes_of("first version"));
  CHECK(io::read_file(dir / "f") == bytes_of("first version"));
  io::write_file_atomic(dir / "f", bytes_of("2nd"));
  CHECK(io::read_file(dir / "f") == bytes_of("2nd"));
  io::write_file_atomic(dir / "empty", {});
  CHECK(io::read_file(dir / "empty").empty());
  CHECK(dir.names() == std::vector<std::string>{"empty", "f"});
}

TEST_CASE("write_file_atomic: a failed write leaves the target as it was and removes its temporary") {
  test::ScratchDir dir;
  const std::string missing = (dir / "no_such_dir" / "f").string();
  CHECK_THROWS_WITH_AS(io::write_file_atomic(missing, bytes_of("x")),
                       (missing + ": cannot create: No such file or directory").c_str(), std::runtime_error);
  CHECK(dir.names().empty());

  // The rename fails after the temporary was written and synced: a directory stands at the target.
  std::filesystem::create_directory(dir / "target");
  io::write_file_atomic(dir / "target" / "inside", bytes_of("kept"));
  const std::string target = (dir / "target").string();
  CHECK_THROWS_WITH_AS(io::write_file_atomic(target, bytes_of("new")), (target + ": cannot replace: Is a directory").c_str(),
                       std::runtime_error);
  CHECK(dir.names() == std::vector<std::string>{"target"});
  CHECK(io::read_file(dir / "target" / "inside") == bytes_of("kept"));
}

TEST_CASE("write_file_atomic: steps over temporaries a crashed process with the same pid left behind") {
  test::ScratchDir dir;
  const std::string target = (dir / "f").string();
  // The names this process's next writes would take (its counter is below 1000 in this test suite).
  for (int i = 0; i < 1000; ++i) std::ofstream(detail::cat(target, ".tmp.", ::getpid(), ".", i)) << "stale";
  const size_t stale = dir.names().size();
  io::write_file_atomic(target, bytes_of("new"));
  CHECK(io::read_file(target) == bytes_of("new"));
  CHECK(dir.names().size() == stale + 1);
}

TEST_CASE("read_file: errors name the path and the system's reason") {
  test::ScratchDir dir;
  const std::string missing = (dir / "missing.bin").string();
  CHECK_THROWS_WITH_AS(io::read_file(missing), (missing + ": cannot open: No such file or directory").c_str(),
                       std::runtime_error);
  const std::string directory = (dir / "").string();
  CHECK_THROWS_WITH_AS(io::read_file(directory), (directory + ": cannot read: Is a directory").c_str(), std::runtime_error);
}

TEST_CASE("write_file_atomic: concurrent readers see whole versions, concurrent writers never collide") {
  test::ScratchDir dir;
  const io::Bytes a(200'000, 'a'), b(300'000, 'b');
  io::write_file_atomic(dir / "f", a);
  std::atomic<bool> done{false};
  std::atomic<int> mixed{0}, reads{0};
  std::thread reader([&] {
    while (!done) {
      const io::Bytes seen = io::read_file(dir / "f");
      if (seen != a && seen != b) ++mixed;
      ++reads;
    }
  });
  // Two writers of the same target: each write has its own temporary.
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w)
    writers.emplace_back([&, w] {
      for (int i = 0; i < 20; ++i) io::write_file_atomic(dir / "f", (i + w) % 2 ? b : a);
    });
  for (std::thread& t : writers) t.join();
  done = true;
  reader.join();
  MESSAGE(reads.load(), " reads during 40 writes");
  CHECK(mixed == 0);
  CHECK(dir.names() == std::vector<std::string>{"f"});
}

}  // namespace test_io_atomic_file
