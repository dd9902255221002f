#include "common/trusted_path.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace gmem {
namespace {

// A tree under a fresh 0755 directory of /tmp; `other` is a uid that is neither root nor the
// caller (65534 as root; as another user, the checks that need chown are skipped).
struct tree {
  std::string root;
  tree() {
    char tmpl[] = "/tmp/gmem_trusted_XXXXXX";
    root = mkdtemp(tmpl);
    chmod(root.c_str(), 0755);
  }
  ~tree() { (void)std::system(("rm -rf '" + root + "'").c_str()); }
  std::string dir(const std::string& name, mode_t mode) const {
    const std::string p = root + "/" + name;
    mkdir(p.c_str(), mode);
    chmod(p.c_str(), mode);
    return p;
  }
  std::string file(const std::string& name, mode_t mode) const {
    const std::string p = root + "/" + name;
    FILE* f = std::fopen(p.c_str(), "w");
    if (f != nullptr) std::fclose(f);
    chmod(p.c_str(), mode);
    return p;
  }
};

TEST(trusted_path, own_files_in_own_directories_pass) {
  tree t;
  t.dir("lib", 0755);
  const std::string lib = t.file("lib/libgmem.so", 0755);
  EXPECT_EQ(untrusted_path_problem(lib, geteuid(), false), "");
  EXPECT_EQ(untrusted_path_problem(t.root + "/lib", geteuid(), true), "");
  EXPECT_EQ(untrusted_path_problem("/", geteuid(), true), "");
  // What the last component must be.
  EXPECT_NE(untrusted_path_problem(lib, geteuid(), true).find("is not a directory"),
            std::string::npos);
}

TEST(trusted_path, writable_by_others_fails_unless_a_sticky_directory) {
  tree t;
  t.dir("open", 0777);
  const std::string in_open = t.file("open/libgmem.so", 0755);
  EXPECT_NE(untrusted_path_problem(in_open, geteuid(), false).find(t.root + "/open is writable"),
            std::string::npos);
  t.dir("sticky", 01777); // like /tmp: others add entries, cannot replace ours
  const std::string in_sticky = t.file("sticky/libgmem.so", 0755);
  EXPECT_EQ(untrusted_path_problem(in_sticky, geteuid(), false), "");
  const std::string group_writable = t.file("sticky/g.so", 0775);
  EXPECT_NE(untrusted_path_problem(group_writable, geteuid(), false).find("writable by others"),
            std::string::npos);
}

TEST(trusted_path, links_dot_dot_and_relative_paths_fail) {
  tree t;
  t.dir("lib", 0755);
  t.file("lib/libgmem.so", 0755);
  ASSERT_EQ(symlink((t.root + "/lib").c_str(), (t.root + "/link").c_str()), 0);
  EXPECT_NE(untrusted_path_problem(t.root + "/link/libgmem.so", geteuid(), false)
                .find("is a symbolic link"),
            std::string::npos);
  EXPECT_NE(
      untrusted_path_problem(t.root + "/lib/../lib/libgmem.so", geteuid(), false).find("'..'"),
      std::string::npos);
  EXPECT_NE(untrusted_path_problem("lib/libgmem.so", geteuid(), false).find("not an absolute"),
            std::string::npos);
  EXPECT_NE(untrusted_path_problem(t.root + "/lib/none.so", geteuid(), false).find("missing"),
            std::string::npos);
}

// The attack of a checkout under /tmp: a directory /tmp/lib of another user's, holding a
// libgmem.so of theirs. Neither it nor anything under it passes, for root or anyone else.
TEST(trusted_path, another_users_directory_or_file_fails) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give files to a second uid";
  tree t;
  const std::string theirs = t.dir("theirs", 0755);
  const std::string lib = t.file("theirs/libgmem.so", 0755);
  ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
  EXPECT_NE(untrusted_path_problem(lib, 0, false).find(theirs + " is owned by another user"),
            std::string::npos);
  ASSERT_EQ(chown(theirs.c_str(), 0, 0), 0);
  ASSERT_EQ(chown(lib.c_str(), 65534, 65534), 0);
  EXPECT_NE(
      untrusted_path_problem(lib, 0, false).find(lib + " is owned by another user (uid 65534)"),
      std::string::npos);
  // The owner itself may use it.
  EXPECT_EQ(untrusted_path_problem(lib, 65534, false), "");
}

} // namespace
} // namespace gmem
