"""The paper at the end of the DAG: numbers for its prose (``numbers``), the check that
no number is typed into it (``check``), and the side-by-side of reproduced against
published numbers (``reproduction``). ``lookup`` finds one number in a results table,
for all of them."""
