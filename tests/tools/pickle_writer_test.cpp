#include "tools/export/pickle_writer.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

// GCC 12 with -fsanitize=address reports std::string inside std::variant as maybe
// uninitialized in the brace-initialized py_dict below (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace gmem::tools {
namespace {

TEST(pickle_writer, small_values_use_short_opcodes) {
  EXPECT_EQ(encode_pickle(py_value{}), std::string("\x80\x02N.", 4));
  EXPECT_EQ(encode_pickle(py_value(7)), std::string("\x80\x02K\x07.", 5));
  EXPECT_EQ(encode_pickle(py_value(300)), std::string("\x80\x02M\x2c\x01.", 6));
  EXPECT_EQ(encode_pickle(py_value(-1)), std::string("\x80\x02J\xff\xff\xff\xff.", 8));
  EXPECT_EQ(encode_pickle(py_value(true)), std::string("\x80\x02\x88.", 4));
  EXPECT_EQ(encode_pickle(py_value("ab")), std::string("\x80\x02X\x02\x00\x00\x00"
                                                       "ab.",
                                                       10));
  // 2^32 needs LONG1 with 5 bytes; 2^63 needs 9 (sign byte).
  EXPECT_EQ(encode_pickle(py_value(std::uint64_t{1} << 32)),
            std::string("\x80\x02\x8a\x05\x00\x00\x00\x00\x01.", 10));
  EXPECT_EQ(encode_pickle(py_value(std::uint64_t{1} << 63)).size(), 2u + 2u + 9u + 1u);
  EXPECT_EQ(encode_pickle(py_value(py_list{})), std::string("\x80\x02].", 4));
  EXPECT_EQ(encode_pickle(py_value(py_dict{{"a", 1}})), std::string("\x80\x02}(X\x01\x00\x00\x00"
                                                                    "aK\x01u.",
                                                                    14));
}

// Python's own unpickler must read what we write: the exported snapshots are loaded by
// torch.cuda._memory_viz with pickle.load.
TEST(pickle_writer, python_loads_it) {
  if (std::system("python3 -c 'import pickle' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  py_list many;
  for (int i = 0; i < 2500; ++i)
    many.push_back(i * 1000);
  py_value v = py_dict{{"segments", py_list{py_dict{{"address", std::uint64_t{0x7f1234567000}},
                                                    {"total_size", std::uint64_t{20} << 20},
                                                    {"blocks", py_list{}}}}},
                       {"neg", std::int64_t{-5'000'000'000}},
                       {"big", ~std::uint64_t{0}},
                       {"min", INT64_MIN},
                       {"f", 1.5},
                       {"none", py_value{}},
                       {"flags", py_list{true, false}},
                       {"text", "h\xc3\xa9llo"},
                       {"many", std::move(many)}};
  char path[] = "/tmp/gmem_pickle_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string bytes = encode_pickle(v);
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);
  const std::string check =
      "python3 -c \"import pickle,sys; d=pickle.load(open(sys.argv[1],'rb')); "
      "assert d['segments'][0]['address']==0x7f1234567000, d; "
      "assert d['segments'][0]['total_size']==20<<20; assert d['segments'][0]['blocks']==[]; "
      "assert d['neg']==-5000000000; assert d['big']==2**64-1; assert d['min']==-2**63; "
      "assert d['f']==1.5 and d['none'] is None and d['flags']==[True,False]; "
      "assert d['text']=='h\\u00e9llo'; assert d['many']==[i*1000 for i in range(2500)]; "
      "assert list(d)==['segments','neg','big','min','f','none','flags','text','many']\" ";
  EXPECT_EQ(std::system((check + path).c_str()), 0);
  unlink(path);
}

} // namespace
} // namespace gmem::tools
