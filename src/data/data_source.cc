// ht::data::DataSource defaults.
#include "ht/data/data_source.h"

namespace ht::data {

MicroBatch DataSource::validation(std::int64_t index) {
  HT_CHECK(false, ErrorKind::kNotSupported,
           "this data source has no validation data (asked for validation batch {}); turn validation off "
           "(--eval-every 0 --eval-batches 0) or give the source a validation split",
           index);
  return {};
}

}  // namespace ht::data
