"""SQL text to expression trees: CREATE statements, WHERE predicates, partition and sort keys.

Owns parsing, binding to a schema, evaluating over Arrow arrays, and what a predicate says about
partitions and primary-key ranges. May import format/ (types, partition-id hashing), fileops and
errors; never txn/, engine/ or above.
"""

from spark_mergetree.expressions.ddl import (
    ColumnDefinition,
    TableDefinition,
    format_attach,
    format_create,
    parse_create,
)
from spark_mergetree.expressions.key_condition import (
    granule_ranges,
    key_columns_for,
    may_match_minmax,
    may_match_partition,
)
from spark_mergetree.expressions.partition_key import PartitionGroup, PartitionKey
from spark_mergetree.expressions.predicate import (
    And,
    Column,
    Compare,
    Contains,
    EndsWith,
    Expr,
    Func,
    HasToken,
    In,
    IsNaN,
    IsNotNull,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
    StartsWith,
    between,
    bind,
    columns_of,
    evaluate,
    evaluate_value,
    filter_table,
    parse_predicate,
)
from spark_mergetree.expressions.sort_key import key_element_arrays, key_element_types, sort_indices

__all__ = [
    "And", "Column", "ColumnDefinition", "Compare", "Contains", "EndsWith", "Expr", "Func", "HasToken", "In", "IsNaN",
    "IsNotNull", "IsNull", "Like", "Literal", "Not", "Or", "PartitionGroup", "PartitionKey", "StartsWith", "TableDefinition",
    "between", "bind", "columns_of", "evaluate", "filter_table", "format_attach", "format_create",
    "granule_ranges", "key_columns_for", "may_match_minmax", "may_match_partition", "parse_create",
    "parse_predicate", "evaluate_value", "key_element_arrays", "key_element_types", "sort_indices",
]
