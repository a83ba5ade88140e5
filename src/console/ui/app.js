/* placeholder: the console UI is being written */
