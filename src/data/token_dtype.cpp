#include "data/token_dtype.h"

namespace bigbatch {

const NameTable<TokenDtype>& token_dtype_names() {
  static const NameTable<TokenDtype> table{
      "--token-dtype",
      "--token-dtype",
      {{TokenDtype::Auto, "auto"}, {TokenDtype::Uint16, "uint16"}, {TokenDtype::Uint32, "uint32"}}};
  return table;
}

}  // namespace bigbatch
