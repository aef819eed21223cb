/*
 * vt_ring.c - one read-only virtual table module for every pb_table (registry.h).
 *
 * Each registered table gets its own module, "pb_<schema>_<name>", whose pAux is the pb_table;
 * the declared schema comes from the table's pb_column list. A cursor walks ring indices from
 * pb_ring_first() up to the pb_ring_head() seen when the scan started, copying each row into a
 * buffer owned by the cursor with pb_ring_read(); rows overwritten meanwhile are skipped, never
 * returned torn. xColumn decodes the copied row per pb_col_kind. Nothing is allocated per row.
 *
 * Step ranges: when the table names a step_column (an integer column whose value never
 * decreases in push order), xBestIndex takes =, <, <=, >, >= constraints on it and xFilter
 * narrows the index range by binary search. The constraints are not omitted: SQLite still checks
 * every row, so the range only has to be a superset of the answer. That keeps odd cases simple:
 * a row the search cannot read is treated so that the range grows, never shrinks wrongly.
 */
#include "vt.h"


#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_STEP_CONSTRAINTS 8

enum { OP_EQ = 1, OP_GT, OP_GE, OP_LT, OP_LE };
#define ORDER_DESC (1 << 30) /* idxNum flag: scan newest first */

typedef struct ring_vtab {
    sqlite3_vtab base;
    const pb_table *table;
    int step_column;  /* usable step column, or -1 */
    int enum_counts[]; /* per column: number of enum_names (PB_COL_ENUM_U8 only) */
} ring_vtab;

typedef struct ring_cursor {
    sqlite3_vtab_cursor base;
    const pb_table *table;
    const int *enum_counts;
    uint64_t index; /* ring index of the row in `row` */
    uint64_t end;   /* stop before this index */
    uint64_t lo;    /* descending scans stop below this index */
    int desc;       /* scanning from the newest row back (ORDER BY step DESC, MAX(step)) */
    int eof;
    unsigned char row[];
} ring_cursor;

static int is_integer_kind(pb_col_kind kind)
{
    return kind == PB_COL_I64 || kind == PB_COL_I32 || kind == PB_COL_U32 || kind == PB_COL_U16 ||
           kind == PB_COL_U8;
}

/* Reads an integer column (is_integer_kind) from a row copy. */
static int64_t read_integer(const pb_column *c, const unsigned char *row)
{
    pb_cell v;
    pb_column_decode(c, row, 0, &v);
    return v.i;
}

static int ring_connect(sqlite3 *conn, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **out, char **errmsg)
{
    const pb_table *t = aux;
    ring_vtab *vt = NULL;
    sqlite3_str *decl = sqlite3_str_new(conn);
    sqlite3_str_appendall(decl, "CREATE TABLE x(");
    for (int i = 0; i < t->ncolumns; i++)
        sqlite3_str_appendf(decl, "%s\"%w\" %s", i ? ", " : "", t->columns[i].name,
                            pb_col_sql_type(t->columns[i].kind));
    sqlite3_str_appendall(decl, ")");
    char *sql = sqlite3_str_finish(decl);
    if (!sql) return SQLITE_NOMEM;
    int rc = sqlite3_declare_vtab(conn, sql);
    sqlite3_free(sql);
    if (rc != SQLITE_OK) goto fail;
    sqlite3_vtab_config(conn, SQLITE_VTAB_INNOCUOUS);

    vt = sqlite3_malloc64(sizeof *vt + sizeof(int) * (size_t)t->ncolumns);
    if (!vt) {
        rc = SQLITE_NOMEM;
        goto fail;
    }
    memset(vt, 0, sizeof *vt);
    vt->table = t;
    vt->step_column = -1;
    if (t->step_column >= 0 && t->step_column < t->ncolumns &&
        is_integer_kind(t->columns[t->step_column].kind))
        vt->step_column = t->step_column;
    for (int i = 0; i < t->ncolumns; i++) {
        int n = 0;
        if (t->columns[i].kind == PB_COL_ENUM_U8 && t->columns[i].enum_names)
            while (t->columns[i].enum_names[n]) n++;
        vt->enum_counts[i] = n;
    }
    *out = &vt->base;
    return SQLITE_OK;

fail:
    *errmsg = sqlite3_mprintf("%s", sqlite3_errstr(rc));
    return rc;
}

static int ring_disconnect(sqlite3_vtab *base)
{
    sqlite3_free(base);
    return SQLITE_OK;
}

static uint64_t rows_held(const pb_table *t)
{
    if (!t->ring) return 0;
    uint64_t head = pb_ring_head(t->ring), cap = pb_ring_capacity(t->ring);
    return head < cap ? head : cap;
}

static int ring_best_index(sqlite3_vtab *base, sqlite3_index_info *info)
{
    ring_vtab *vt = (ring_vtab *)base;
    double nrows = (double)rows_held(vt->table) + 1;
    int n = 0, has_eq = 0, has_lower = 0, has_upper = 0, idx_num = 0;

    for (int i = 0; vt->step_column >= 0 && i < info->nConstraint && n < MAX_STEP_CONSTRAINTS; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        if (!c->usable || c->iColumn != vt->step_column) continue;
        int op;
        switch (c->op) {
        case SQLITE_INDEX_CONSTRAINT_EQ: op = OP_EQ; has_eq = 1; break;
        case SQLITE_INDEX_CONSTRAINT_GT: op = OP_GT; has_lower = 1; break;
        case SQLITE_INDEX_CONSTRAINT_GE: op = OP_GE; has_lower = 1; break;
        case SQLITE_INDEX_CONSTRAINT_LT: op = OP_LT; has_upper = 1; break;
        case SQLITE_INDEX_CONSTRAINT_LE: op = OP_LE; has_upper = 1; break;
        default: continue;
        }
        info->aConstraintUsage[i].argvIndex = n + 1;
        info->aConstraintUsage[i].omit = 0; /* the range is a superset; SQLite re-checks */
        idx_num |= op << (4 + 3 * n);
        n++;
    }
    info->idxNum = idx_num | n;

    /* Rows are in step order: ORDER BY step (and SQLite's MIN/MAX optimisation, which asks for
     * that order and reads one row) costs nothing; DESC is a backwards scan. */
    if (vt->step_column >= 0 && info->nOrderBy == 1 && info->aOrderBy[0].iColumn == vt->step_column) {
        info->orderByConsumed = 1;
        if (info->aOrderBy[0].desc) info->idxNum |= ORDER_DESC;
    }

    double rows = nrows;
    if (has_eq) rows = nrows / 100;
    else if (has_lower && has_upper) rows = nrows / 10;
    else if (has_lower || has_upper) rows = nrows / 3;
    if (rows < 1) rows = 1;
    info->estimatedRows = (sqlite3_int64)rows;
    info->estimatedCost = rows + (n ? log2(nrows + 1) : 0);
    return SQLITE_OK;
}

static int ring_open(sqlite3_vtab *base, sqlite3_vtab_cursor **out)
{
    ring_vtab *vt = (ring_vtab *)base;
    size_t row_size = vt->table->row_size;
    ring_cursor *c = sqlite3_malloc64(sizeof *c + row_size);
    if (!c) return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    c->table = vt->table;
    c->enum_counts = vt->enum_counts;
    *out = &c->base;
    return SQLITE_OK;
}

static int ring_close(sqlite3_vtab_cursor *base)
{
    sqlite3_free(base);
    return SQLITE_OK;
}

/* Moves to the first intact row at or after c->index (or to the end). A failed read below
 * pb_ring_first() means the writers lapped us: jump to the oldest row still held. */
static void settle(ring_cursor *c)
{
    const pb_ring *ring = c->table->ring;
    while (c->index < c->end) {
        if (pb_ring_read(ring, c->index, c->row)) return;
        uint64_t first = pb_ring_first(ring);
        c->index = c->index < first ? first : c->index + 1;
    }
}

/* Descending: moves to the newest intact row at or below c->index, not below c->lo. A row that
 * cannot be read below pb_ring_first() means everything older is gone too: end. */
static void settle_desc(ring_cursor *c)
{
    const pb_ring *ring = c->table->ring;
    for (;;) {
        if (c->index < c->lo || c->index >= c->end) {
            c->eof = 1;
            return;
        }
        if (pb_ring_read(ring, c->index, c->row)) return;
        if (c->index < pb_ring_first(ring) || c->index == 0) {
            c->eof = 1;
            return;
        }
        c->index--;
    }
}

/* First index in [lo, hi) whose step is >= v, or hi. `buf` receives row copies. A row that
 * cannot be read is older than all readable rows if it lies below pb_ring_first() (counts as
 * "step < v"); otherwise it is being written and counts as `unreadable_is_ge`, which callers
 * choose so that the resulting range can only grow. */
static uint64_t first_step_ge(const pb_ring *ring, const pb_column *col, uint64_t lo, uint64_t hi,
                              int64_t v, int unreadable_is_ge, unsigned char *buf)
{
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int ge;
        if (pb_ring_read(ring, mid, buf)) ge = read_integer(col, buf) >= v;
        else if (mid < pb_ring_first(ring)) ge = 0;
        else ge = unreadable_is_ge;
        if (ge) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

static int ring_filter(sqlite3_vtab_cursor *base, int idx_num, const char *idx_str, int argc,
                       sqlite3_value **argv)
{
    ring_cursor *c = (ring_cursor *)base;
    const pb_table *t = c->table;
    (void)idx_str;
    c->index = c->end = c->lo = 0;
    c->desc = c->eof = 0;
    if (!t->ring) return SQLITE_OK;
    const pb_ring *ring = t->ring;
    uint64_t hi = pb_ring_head(ring);
    uint64_t lo = pb_ring_first(ring);
    int n = idx_num & 15;
    const pb_column *col = n ? &t->columns[t->step_column] : NULL;

    for (int k = 0; k < n && k < argc && lo < hi; k++) {
        int op = (idx_num >> (4 + 3 * k)) & 7;
        int64_t ge_bound = INT64_MIN, le_bound = INT64_MAX; /* want ge_bound <= step <= le_bound */
        int has_ge = 0, has_le = 0;
        sqlite3_value *value = argv[k];
        int type = sqlite3_value_type(value);
        if (type == SQLITE_INTEGER) {
            int64_t v = sqlite3_value_int64(value);
            switch (op) {
            case OP_EQ: ge_bound = le_bound = v; has_ge = has_le = 1; break;
            case OP_GT: if (v == INT64_MAX) { lo = hi; continue; } ge_bound = v + 1; has_ge = 1; break;
            case OP_GE: ge_bound = v; has_ge = 1; break;
            case OP_LT: if (v == INT64_MIN) { lo = hi; continue; } le_bound = v - 1; has_le = 1; break;
            case OP_LE: le_bound = v; has_le = 1; break;
            }
        } else if (type == SQLITE_FLOAT) {
            double d = sqlite3_value_double(value);
            if (isnan(d) || d < -9.2e18 || d > 9.2e18) continue; /* no narrowing; SQLite decides */
            int64_t lower = (int64_t)ceil(d), upper = (int64_t)floor(d);
            switch (op) {
            case OP_EQ: ge_bound = lower; le_bound = upper; has_ge = has_le = 1; break;
            case OP_GT: ge_bound = upper + 1; has_ge = 1; break;
            case OP_GE: ge_bound = lower; has_ge = 1; break;
            case OP_LT: le_bound = lower - 1; has_le = 1; break;
            case OP_LE: le_bound = upper; has_le = 1; break;
            }
        } else {
            continue; /* text, blob, NULL: comparison rules are SQLite's, keep the full range */
        }
        if (has_ge) {
            uint64_t i = first_step_ge(ring, col, lo, hi, ge_bound, 1, c->row);
            if (i > lo) lo = i;
        }
        if (has_le && lo < hi) {
            uint64_t i = le_bound == INT64_MAX ? hi
                                               : first_step_ge(ring, col, lo, hi, le_bound + 1, 0, c->row);
            if (i < hi) hi = i;
        }
    }
    c->end = hi > lo ? hi : lo;
    c->lo = lo;
    c->eof = 0;
    c->desc = (idx_num & ORDER_DESC) != 0;
    if (c->desc) {
        if (c->end == lo) {
            c->eof = 1;
            return SQLITE_OK;
        }
        c->index = c->end - 1;
        settle_desc(c);
        return SQLITE_OK;
    }
    c->index = lo;
    settle(c);
    return SQLITE_OK;
}

static int ring_next(sqlite3_vtab_cursor *base)
{
    ring_cursor *c = (ring_cursor *)base;
    if (c->desc) {
        if (c->index == 0) c->eof = 1;
        else {
            c->index--;
            settle_desc(c);
        }
        return SQLITE_OK;
    }
    c->index++;
    settle(c);
    return SQLITE_OK;
}

static int ring_eof(sqlite3_vtab_cursor *base)
{
    const ring_cursor *c = (const ring_cursor *)base;
    return c->desc ? c->eof : c->index >= c->end;
}

static int ring_column(sqlite3_vtab_cursor *base, sqlite3_context *ctx, int i)
{
    const ring_cursor *c = (const ring_cursor *)base;
    pb_cell v;
    pb_column_decode(&c->table->columns[i], c->row, c->enum_counts[i], &v);
    switch (v.type) {
    case PB_CELL_INT: sqlite3_result_int64(ctx, v.i); break;
    case PB_CELL_REAL: sqlite3_result_double(ctx, v.d); break;
    case PB_CELL_TEXT: sqlite3_result_text(ctx, v.s, -1, SQLITE_STATIC); break;
    case PB_CELL_NULL: sqlite3_result_null(ctx); break;
    }
    return SQLITE_OK;
}

static int ring_rowid(sqlite3_vtab_cursor *base, sqlite3_int64 *rowid)
{
    *rowid = (sqlite3_int64)((const ring_cursor *)base)->index;
    return SQLITE_OK;
}

static const sqlite3_module ring_module = {
    .iVersion = 1,
    .xCreate = ring_connect,
    .xConnect = ring_connect,
    .xBestIndex = ring_best_index,
    .xDisconnect = ring_disconnect,
    .xDestroy = ring_disconnect,
    .xOpen = ring_open,
    .xClose = ring_close,
    .xFilter = ring_filter,
    .xNext = ring_next,
    .xEof = ring_eof,
    .xColumn = ring_column,
    .xRowid = ring_rowid,
};

int pb__vt_ring_create(sqlite3 *conn, pb_table *t, char **errmsg)
{
    char *module = sqlite3_mprintf("pb_%s_%s", t->schema, t->name);
    if (!module) return SQLITE_NOMEM;
    int rc = sqlite3_create_module_v2(conn, module, &ring_module, t, NULL);
    if (rc == SQLITE_OK) {
        char *sql = sqlite3_mprintf("CREATE VIRTUAL TABLE \"%w\".\"%w\" USING \"%w\"", t->schema,
                                    t->name, module);
        rc = sql ? sqlite3_exec(conn, sql, NULL, NULL, errmsg) : SQLITE_NOMEM;
        sqlite3_free(sql);
    }
    sqlite3_free(module);
    return rc;
}
