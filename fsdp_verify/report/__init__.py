"""Reports: text accounts, the campaign summary, JUnit XML and Graphviz pictures."""
