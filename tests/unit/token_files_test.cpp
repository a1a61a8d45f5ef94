#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/token_files.h"
#include "data/token_rows.h"

namespace bigbatch {
namespace {

using Bytes = std::vector<uint8_t>;

template <typename T>
void put(Bytes& out, T value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

// A Megatron pair of uint16 documents (one sequence each), as megatron's _IndexWriter lays it out.
struct MegatronPair {
  Bytes index, data;
};
MegatronPair megatron(const std::vector<std::vector<uint16_t>>& documents, uint8_t code = 8) {
  MegatronPair pair;
  const char magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  for (char c : magic)
    pair.index.push_back(uint8_t(c));
  put<uint64_t>(pair.index, 1);
  put<uint8_t>(pair.index, code);
  put<uint64_t>(pair.index, documents.size());
  put<uint64_t>(pair.index, documents.size() + 1);
  for (const auto& d : documents)
    put<int32_t>(pair.index, int32_t(d.size()));
  int64_t offset = 0;
  for (const auto& d : documents) {
    put<int64_t>(pair.index, offset);
    offset += int64_t(d.size() * 2);
  }
  for (size_t i = 0; i <= documents.size(); ++i)
    put<int64_t>(pair.index, int64_t(i));
  for (const auto& d : documents)
    for (uint16_t t : d)
      put<uint16_t>(pair.data, t);
  return pair;
}

Bytes llmc(const std::vector<uint32_t>& tokens, int32_t magic = 20240520, int32_t version = 1,
           std::optional<int32_t> count = std::nullopt) {
  Bytes out;
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count.value_or(int32_t(tokens.size()));
  for (int32_t h : header)
    put<int32_t>(out, h);
  for (uint32_t t : tokens) {
    if (version == 7) {
      put<uint32_t>(out, t);
    } else {
      put<uint16_t>(out, uint16_t(t));
    }
  }
  return out;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.what()) + " | " + e.hint();
  }
  return "(no error)";
}

TEST(TokenFiles, MegatronDocumentsAreReadAsRecorded) {
  const auto pair = megatron({{1, 2, 3}, {7}, {9, 8, 7, 6}});
  TokenFiles out;
  parse_megatron_tokens(pair.index.data(), pair.index.size(), pair.data.data(), pair.data.size(),
                        "d.bin", out);
  EXPECT_TRUE(out.has_documents);
  EXPECT_EQ(out.documents.all_tokens(), (std::vector<int32_t>{1, 2, 3, 7, 9, 8, 7, 6}));
  EXPECT_EQ(out.documents.starts, (std::vector<int64_t>{0, 3, 4, 8}));
  EXPECT_EQ(out.largest_token, 9);
  EXPECT_EQ(out.format, "Megatron indexed dataset (uint16)");
}

TEST(TokenFiles, MegatronDocumentsOfSeveralSequencesAreJoined) {
  auto pair = megatron({{1, 2}, {3}, {4, 5}});
  // Document entries 0, 2, 3: the first document spans sequences 0 and 1.
  const size_t doc_table = pair.index.size() - 4 * 8;
  const int64_t entries[3] = {0, 2, 3};
  pair.index.resize(doc_table);
  for (int64_t e : entries)
    put<int64_t>(pair.index, e);
  std::memcpy(pair.index.data() + 26, "\x03\0\0\0\0\0\0\0", 8);  // 3 document entries
  TokenFiles out;
  parse_megatron_tokens(pair.index.data(), pair.index.size(), pair.data.data(), pair.data.size(),
                        "d.bin", out);
  EXPECT_EQ(out.documents.starts, (std::vector<int64_t>{0, 3, 5}));
}

TEST(TokenFiles, MegatronIndexesThatLieAreRefusedNamingWhat) {
  const auto good = megatron({{1, 2, 3}, {4, 5}});
  auto parse = [](const MegatronPair& p) {
    TokenFiles out;
    parse_megatron_tokens(p.index.data(), p.index.size(), p.data.data(), p.data.size(), "d.bin",
                          out);
  };
  auto bad = good;
  bad.index[0] = 'X';
  EXPECT_NE(message_of([&] { parse(bad); }).find("does not start with MMIDIDX"), std::string::npos);
  // Issue 36: an index cut inside its header starts right: it is said to be cut short.
  for (const size_t kept : {size_t(4), size_t(20)}) {
    bad = good;
    bad.index.resize(kept);
    const std::string cut = message_of([&] { parse(bad); });
    EXPECT_NE(cut.find("is cut short: " + std::to_string(kept) + " bytes"), std::string::npos)
        << cut;
  }
  bad = good;
  bad.index[17] = 7;  // float32
  EXPECT_NE(message_of([&] { parse(bad); }).find("dtype code 7"), std::string::npos);
  bad = good;
  bad.index[18] = 200;  // 200 sequences: more than the file holds
  EXPECT_NE(message_of([&] { parse(bad); }).find("more than its"), std::string::npos);
  bad = good;
  bad.index.pop_back();
  EXPECT_NE(message_of([&] { parse(bad); }).find("counts"), std::string::npos);
  bad = good;
  bad.index[34] = 9;  // sequence 0 of 9 tokens: past the .bin
  EXPECT_NE(message_of([&] { parse(bad); }).find("beyond its .bin"), std::string::npos);
  bad = good;
  bad.index[34 + 8 + 8] = 2;  // sequence 1 starts at byte 2, not 6
  EXPECT_NE(message_of([&] { parse(bad); }).find("puts sequence 1 at byte 2"), std::string::npos);
  bad = good;
  bad.data.push_back(0);
  bad.data.push_back(0);
  EXPECT_NE(message_of([&] { parse(bad); }).find("covers 10 bytes of its .bin, which has 12"),
            std::string::npos);
  bad = good;
  bad.data.push_back(0);
  EXPECT_NE(message_of([&] { parse(bad); }).find("not a whole number of uint16"),
            std::string::npos);
  bad = good;
  bad.index[bad.index.size() - 8] = 1;  // the last document entry is not the sequence count
  EXPECT_NE(message_of([&] { parse(bad); }).find("document entry 2 = 1"), std::string::npos);
}

TEST(TokenFiles, MegatronSignedIdsMustNotBeNegative) {
  MegatronPair pair = megatron({{0, 0}}, /*code=*/3);  // int16
  pair.data[2] = 0xff;
  pair.data[3] = 0xff;  // -1
  TokenFiles out;
  EXPECT_NE(message_of([&] {
              parse_megatron_tokens(pair.index.data(), pair.index.size(), pair.data.data(),
                                    pair.data.size(), "d.bin", out);
            }).find("token id -1 at token 1"),
            std::string::npos);
}

TEST(TokenFiles, LlmcShardsOfBothVersions) {
  TokenFiles out;
  const Bytes v1 = llmc({50256, 11, 12});
  parse_llmc_tokens(v1.data(), v1.size(), "a.bin", out);
  const Bytes v7 = llmc({128000, 5}, 20240801, 7);
  parse_llmc_tokens(v7.data(), v7.size(), "b.bin", out);
  EXPECT_FALSE(out.has_documents);
  EXPECT_EQ(out.documents.all_tokens(), (std::vector<int32_t>{50256, 11, 12, 128000, 5}));
  EXPECT_EQ(out.documents.documents(), 2);  // one stream per shard
  EXPECT_EQ(out.largest_token, 128000);
  EXPECT_EQ(out.format, "llm.c shard (uint16), llm.c shard (uint32)");
}

TEST(TokenFiles, LlmcHeadersThatLieAreRefused) {
  auto parse = [](const Bytes& b) {
    TokenFiles out;
    parse_llmc_tokens(b.data(), b.size(), "s.bin", out);
  };
  EXPECT_NE(message_of([&] {
              parse(llmc({1, 2}, 123));
            }).find("header magic 123"),
            std::string::npos);
  EXPECT_NE(message_of([&] { parse(llmc({1, 2}, 123)); }).find("--token-dtype"), std::string::npos);
  EXPECT_NE(message_of([&] {
              parse(llmc({1, 2}, 20240520, 3));
            }).find("version 3"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              parse(llmc({1, 2}, 20240520, 1, 5));
            }).find("holds 5 tokens"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              parse(llmc({1, 2}, 20240520, 1, -2));
            }).find("holds -2"),
            std::string::npos);
  EXPECT_NE(message_of([&] { parse(Bytes(100, 0)); }).find("shorter than an llm.c header"),
            std::string::npos);
}

TEST(TokenFiles, HeaderlessFilesNeedTheirDtypeAndWholeTokens) {
  const Bytes data = {1, 0, 2, 0, 3, 1};
  TokenFiles out;
  parse_raw_tokens(data.data(), data.size(), TokenDtype::Uint16, "t.bin", out);
  EXPECT_EQ(out.documents.all_tokens(), (std::vector<int32_t>{1, 2, 259}));
  EXPECT_NE(message_of([&] {
              TokenFiles o;
              parse_raw_tokens(data.data(), 5, TokenDtype::Uint16, "t.bin", o);
            }).find("5 bytes, not a whole number of uint16"),
            std::string::npos);
  const Bytes big = {0, 0, 0, 0x80};  // 2^31: beyond an int32 id
  EXPECT_NE(message_of([&] {
              TokenFiles o;
              parse_raw_tokens(big.data(), big.size(), TokenDtype::Uint32, "t.bin", o);
            }).find("token id 2147483648"),
            std::string::npos);
}

TEST(TokenRowsOfIds, DocumentsPaddedPackedBlocksShifted) {
  TokenDocuments docs;
  docs.add({5, 6, 7});
  docs.add({9});  // nothing to predict
  docs.add({1, 2, 3, 4, 5, 6});
  const TokenRows rows = document_rows(docs, /*seq_len=*/3, /*pad=*/0);
  EXPECT_EQ(rows.rows(), 2);
  EXPECT_EQ(rows.short_documents, 1);
  EXPECT_EQ(rows.cut_documents, 1);
  EXPECT_EQ(rows.inputs(), (std::vector<int32_t>{5, 6, 0, 1, 2, 3}));
  EXPECT_EQ(rows.targets(), (std::vector<int32_t>{6, 7, kIgnoreTarget, 2, 3, 4}));
  EXPECT_EQ(rows.lengths, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(rows.bytes, (std::vector<int64_t>{0, 0}));  // no byte lengths: no text known
  const TokenRows packed = packed_rows(docs, 4, 0);
  // Stream 5 6 7 9 1 2 3 4 5 6: blocks [0, 5) and [4, 9); the tail is dropped.
  EXPECT_EQ(packed.inputs(), (std::vector<int32_t>{5, 6, 7, 9, 1, 2, 3, 4}));
  EXPECT_EQ(packed.targets(), (std::vector<int32_t>{6, 7, 9, 1, 2, 3, 4, 5}));
  // With each token's bytes known: a row counts the bytes of its targets.
  TokenDocuments text = docs;
  text.bytes = {1, 2, 3, 0, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(packed_rows(text, 4, 0).bytes, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(document_rows(text, 3, 0).bytes, (std::vector<int64_t>{5, 3}));
}

// Token files are read where they lie: spans of any id width, end to end, read across their
// boundaries; rows over them are a table, filled on demand exactly as rows of ids in memory.
TEST(TokenSpans, ReadsAcrossSpansOfAnyWidthAndRowsFillFromThem) {
  Bytes narrow, wide, tiny;
  for (uint16_t t : {5, 6, 7})
    put<uint16_t>(narrow, t);
  for (int32_t t : {9, 1, 2, 3, 4, 70000})
    put<int32_t>(wide, t);
  put<int8_t>(tiny, 127);
  TokenDocuments mapped;
  mapped.spans.append(nullptr, narrow.data(), 3, 2, false);
  mapped.close_document();
  mapped.spans.append(nullptr, wide.data() + 4, 5, 4, true);  // from the second id on
  mapped.spans.append(nullptr, tiny.data(), 1, 1, true);
  mapped.close_document();
  EXPECT_EQ(mapped.size(), 9);
  EXPECT_EQ(mapped.starts, (std::vector<int64_t>{0, 3, 9}));
  EXPECT_EQ(mapped.all_tokens(), (std::vector<int32_t>{5, 6, 7, 1, 2, 3, 4, 70000, 127}));
  std::vector<int64_t> middle(4);
  mapped.read(2, 4, middle.data());  // three spans' worth
  EXPECT_EQ(middle, (std::vector<int64_t>{7, 1, 2, 3}));

  TokenDocuments in_memory;
  in_memory.add({5, 6, 7});
  in_memory.add({1, 2, 3, 4, 70000, 127});
  for (int64_t seq_len : {2, 3, 8}) {
    const TokenRows a = document_rows(mapped, seq_len, 0), b = document_rows(in_memory, seq_len, 0);
    EXPECT_EQ(a.inputs(), b.inputs()) << seq_len;
    EXPECT_EQ(a.targets(), b.targets()) << seq_len;
    EXPECT_EQ(a.starts, b.starts) << seq_len;
    const TokenRows p = packed_rows(mapped, seq_len, 0), q = packed_rows(in_memory, seq_len, 0);
    EXPECT_EQ(p.inputs(), q.inputs()) << seq_len;  // blocks across the spans' boundaries
    EXPECT_EQ(p.targets(), q.targets()) << seq_len;
  }
  // A row filled to fewer positions than it has: its first ones, still shifted.
  const TokenRows rows = document_rows(mapped, 8, 0);
  std::vector<int64_t> inputs(3), targets(3);
  rows.fill(1, inputs.data(), targets.data(), 3);
  EXPECT_EQ(inputs, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(targets, (std::vector<int64_t>{2, 3, 4}));
  // A selection shares the documents and keeps its rows' order.
  const TokenRows picked = rows.select({1, 0});
  EXPECT_EQ(picked.source, rows.source);
  EXPECT_EQ(picked.lengths, (std::vector<int64_t>{5, 2}));
}

// --eot-id: streams (llm.c, headerless) cut after each end-of-text id, never across files; the
// id ends its document. Files that record documents, and an id that never occurs, are refused.
TEST(TokenFiles, StreamsAreCutIntoDocumentsAtTheEndOfTextId) {
  TokenFiles out;
  const Bytes first = llmc({50256, 11, 12, 50256, 13, 50256, 14});  // llm.c: the id leads
  const Bytes second = llmc({15, 16, 50256, 17});
  parse_llmc_tokens(first.data(), first.size(), "a.bin", out);
  parse_llmc_tokens(second.data(), second.size(), "b.bin", out);
  cut_streams_at(out, 50256, "shards");
  EXPECT_TRUE(out.has_documents);
  EXPECT_EQ(out.eot_id, 50256);
  // [50256] [11 12 50256] [13 50256] [14] | [15 16 50256] [17]
  EXPECT_EQ(out.documents.starts, (std::vector<int64_t>{0, 1, 4, 6, 7, 10, 11}));
  const TokenRows rows = document_rows(out.documents, 8, 0);
  EXPECT_EQ(rows.short_documents, 3);  // the leading id alone, and the two one-token tails
  EXPECT_EQ(rows.lengths, (std::vector<int64_t>{2, 1, 2}));

  EXPECT_NE(message_of([&] {
              TokenFiles none;
              parse_llmc_tokens(second.data(), second.size(), "b.bin", none);
              cut_streams_at(none, 7, "shards");
            })
                .find("end-of-text id 7 never occurs in token data 'shards' (4 tokens, largest id "
                      "50256), so each file would be one document"),
            std::string::npos);
  // Above every id (a uint16 file cannot even hold 70000): said as such.
  EXPECT_NE(message_of([&] {
              TokenFiles small;
              const Bytes ids = llmc({15, 16, 17});
              parse_llmc_tokens(ids.data(), ids.size(), "c.bin", small);
              cut_streams_at(small, 70000, "shards");
            }).find("end-of-text id 70000 is above every id in token data 'shards' (llm.c shard"),
            std::string::npos);
  const auto pair = megatron({{1, 2, 3}, {4, 5}});
  TokenFiles indexed;
  parse_megatron_tokens(pair.index.data(), pair.index.size(), pair.data.data(), pair.data.size(),
                        "d.bin", indexed);
  EXPECT_NE(message_of([&] {
              cut_streams_at(indexed, 3, "d");
            }).find("records its documents, so --eot-id has no stream to cut"),
            std::string::npos);
  // Beside a stream too: the index's documents are not the id's to cut.
  parse_llmc_tokens(second.data(), second.size(), "b.bin", indexed);
  EXPECT_FALSE(indexed.has_documents);
  EXPECT_NE(message_of([&] { cut_streams_at(indexed, 50256, "d"); }).find("records its documents"),
            std::string::npos);
}

}  // namespace
}  // namespace bigbatch
