/* tide_base: buffers, the intrusive heap and list, error text. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"
#include "error.h"
#include "heap.h"
#include "list.h"

static void test_buf(void **state)
{
    tide_buf_t b = TIDE_BUF_INIT;
    (void)state;
    assert_string_equal(tide_buf_cstr(&b), "");
    tide_buf_append_str(&b, "hello");
    tide_buf_printf(&b, " %d", 42);
    assert_int_equal(b.len, 8);
    assert_string_equal(tide_buf_cstr(&b), "hello 42");
    tide_buf_consume(&b, 6);
    assert_string_equal(tide_buf_cstr(&b), "42");
    for (int i = 0; i < 10000; i++)
        tide_buf_append(&b, "x", 1);
    assert_int_equal(b.len, 10002);
    tide_buf_consume(&b, 20000);
    assert_int_equal(b.len, 0);
    tide_buf_free(&b);
    tide_buf_free(&b);
}

typedef struct item {
    tide_heap_node_t node;
    int64_t v;
} item_t;

static void test_heap_orders_and_rekeys(void **state)
{
    tide_heap_t h;
    item_t items[200];
    int64_t last = INT64_MIN;
    (void)state;
    tide_heap_init(&h);
    srand(7);
    for (int i = 0; i < 200; i++) {
        tide_heap_node_init(&items[i].node);
        tide_heap_set(&h, &items[i].node, rand() % 1000);
    }
    for (int i = 0; i < 200; i += 3)
        tide_heap_set(&h, &items[i].node, rand() % 1000); /* re-key */
    for (int i = 1; i < 200; i += 7)
        tide_heap_remove(&h, &items[i].node);
    tide_heap_remove(&h, &items[1].node); /* twice is fine */
    while (tide_heap_peek(&h)) {
        tide_heap_node_t *n = tide_heap_peek(&h);
        assert_true(n->key >= last);
        last = n->key;
        tide_heap_remove(&h, n);
        assert_false(tide_heap_node_queued(n));
    }
    tide_heap_free(&h);
}

typedef struct li {
    int v;
    tide_list_t node;
} li_t;

static void test_list(void **state)
{
    tide_list_t head = TIDE_LIST_INIT(head);
    li_t a = {1, {0}}, b = {2, {0}}, c = {3, {0}};
    tide_list_t *pos, *tmp;
    int sum = 0;
    (void)state;
    tide_list_init(&a.node);
    tide_list_push_back(&head, &a.node);
    tide_list_push_back(&head, &b.node);
    tide_list_push_front(&head, &c.node);
    assert_int_equal(tide_list_entry(tide_list_first(&head), li_t, node)->v, 3);
    tide_list_move_back(&head, &c.node);
    assert_int_equal(tide_list_entry(tide_list_first(&head), li_t, node)->v, 1);
    tide_list_for_each_safe(pos, tmp, &head) {
        sum += tide_list_entry(pos, li_t, node)->v;
        tide_list_remove(pos);
    }
    assert_int_equal(sum, 6);
    assert_true(tide_list_empty(&head));
    assert_false(tide_list_linked(&a.node));
}

static void test_error(void **state)
{
    tide_error_t err;
    char longs[400];
    (void)state;
    tide_errprintf(NULL, "ignored %d", 1);
    tide_errprintf(&err, "field %s", "x");
    assert_string_equal(err.text, "field x");
    memset(longs, 'a', sizeof(longs) - 1);
    longs[sizeof(longs) - 1] = 0;
    tide_errprintf(&err, "%s", longs);
    assert_int_equal(strlen(err.text), sizeof(err.text) - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf),
        cmocka_unit_test(test_heap_orders_and_rekeys),
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
